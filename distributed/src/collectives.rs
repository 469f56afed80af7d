//! The collectives on tensors, with PyTorch's names and semantics (`torch.distributed.*`).
//!
//! Each `x` has an `x_async` twin returning a [`Work`] (PyTorch's `async_op=True`); `x` posts
//! `x_async` and waits (`work::blocking`, which lets the engine run it on the calling thread when
//! nothing else is queued). Ranks are world ranks (`src`, `dst`, as PyTorch's), groups default to
//! the world, and a process that is not a member of the group does nothing (PyTorch returns
//! early there too). Reductions on f16/bf16 sum in f32 and round once; other collectives move
//! 16-bit floats bit for bit. Non-contiguous and device tensors are staged through contiguous
//! host copies and written back before `wait()` returns.

use tensorplay_runtime::autograd::no_grad;
use tensorplay_runtime::{DType, Error, Result, Tensor};

use crate::engine::Collective;
use crate::group::{ProcessGroup, resolve};
use crate::reduce_op::ReduceOp;
use crate::stage::{Staged, check_dtype, check_numel, check_tensor, flatten_from, unflatten_into};
use crate::work::{Work, blocking};

/// The group to run `op` on and whether this process is a member.
fn member_group(op: &str, group: Option<&ProcessGroup>) -> Result<Option<ProcessGroup>> {
    let g = resolve(op, group)?;
    Ok(g.rank().is_some().then_some(g))
}

fn skipped(op: &str) -> Work {
    Work::ready(format!("{op} (not a member of the group)"))
}

/// Divides `t` by `n` in place (the `Avg` of a sum).
fn divide(t: &Tensor, n: usize) -> Result<()> {
    let _g = no_grad();
    t.div_scalar_(n as f64)?;
    Ok(())
}

/// Reduces `tensor` over the group, in place on every rank (PyTorch's `all_reduce`).
///
/// ```no_run
/// use tensorplay_distributed::{self as dist, Backend, ReduceOp};
/// use tensorplay_runtime::Tensor;
/// dist::init_process_group(Backend::Mpi)?;
/// let t = Tensor::from_vec(vec![dist::rank()? as f32; 4], &[4])?;
/// dist::all_reduce(&t, ReduceOp::Sum, None)?;
/// # Ok::<(), tensorplay_runtime::Error>(())
/// ```
pub fn all_reduce(tensor: &Tensor, op: ReduceOp, group: Option<&ProcessGroup>) -> Result<()> {
    crate::ops::all_reduce_inplace(tensor, op, group)
}

/// [`all_reduce`] without waiting.
pub fn all_reduce_async(
    tensor: &Tensor,
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "all_reduce";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    op.check_dtype(OP, tensor.dtype())?;
    let s = Staged::new(OP, "tensor", tensor, true)?;
    let buf = s.wire(OP)?;
    let size = g.size();
    let keep = vec![s.buf.clone()];
    let finish = move || {
        if op == ReduceOp::Avg {
            divide(&s.buf, size)?;
        }
        s.write_back()
    };
    g.post(
        Collective::AllReduce { buf, op },
        keep,
        Some(Box::new(finish)),
    )
}

/// Copies rank `src`'s `tensor` into every rank's `tensor` (PyTorch's `broadcast`).
pub fn broadcast(tensor: &Tensor, src: usize, group: Option<&ProcessGroup>) -> Result<()> {
    crate::ops::broadcast_inplace(tensor, src, group)
}

/// [`broadcast`] without waiting.
pub fn broadcast_async(tensor: &Tensor, src: usize, group: Option<&ProcessGroup>) -> Result<Work> {
    const OP: &str = "broadcast";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    let root = g.member(OP, "src", src)?;
    let s = Staged::new(OP, "tensor", tensor, false)?;
    let buf = s.wire(OP)?;
    let keep = vec![s.buf.clone()];
    g.post(
        Collective::Broadcast { buf, root },
        keep,
        Some(Box::new(move || s.write_back())),
    )
}

/// Gathers every rank's `tensor` into `tensor_list` (one tensor per group rank, each of the
/// input's shape and dtype), on every rank (PyTorch's `all_gather`).
pub fn all_gather(
    tensor_list: &[Tensor],
    tensor: &Tensor,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| all_gather_async(tensor_list, tensor, group))
}

/// [`all_gather`] without waiting.
pub fn all_gather_async(
    tensor_list: &[Tensor],
    tensor: &Tensor,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "all_gather";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    check_list(OP, "tensor_list", tensor_list, tensor, g.size())?;
    let send = Staged::new(OP, "tensor", tensor, false)?;
    let recv = Staged::scratch(tensor.numel() * g.size(), tensor.dtype());
    let c = Collective::AllGather {
        send: send.wire(OP)?,
        recv: recv.wire(OP)?,
    };
    let outs = tensor_list.to_vec();
    let keep = vec![send.buf.clone(), recv.buf.clone()];
    g.post(
        c,
        keep,
        Some(Box::new(move || unflatten_into(&recv.buf, &outs))),
    )
}

/// Gathers every rank's `input` into `output` (`size × input.numel()` elements, ranks along the
/// first dim), on every rank (PyTorch's `all_gather_into_tensor`).
pub fn all_gather_into_tensor(
    output: &Tensor,
    input: &Tensor,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| all_gather_into_tensor_async(output, input, group))
}

/// [`all_gather_into_tensor`] without waiting.
pub fn all_gather_into_tensor_async(
    output: &Tensor,
    input: &Tensor,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "all_gather_into_tensor";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    check_dtype(OP, "output", output, input.dtype())?;
    check_numel(OP, "output", output, input.numel() * g.size())?;
    let send = Staged::new(OP, "input", input, false)?;
    let recv = Staged::new(OP, "output", output, false)?;
    let c = Collective::AllGather {
        send: send.wire(OP)?,
        recv: recv.wire(OP)?,
    };
    let keep = vec![send.buf.clone(), recv.buf.clone()];
    g.post(c, keep, Some(Box::new(move || recv.write_back())))
}

/// Reduces `input_list` (one tensor per group rank) over the group and leaves rank `r` the
/// reduction of the `r`-th tensors in `output` (PyTorch's `reduce_scatter`).
pub fn reduce_scatter(
    output: &Tensor,
    input_list: &[Tensor],
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| reduce_scatter_async(output, input_list, op, group))
}

/// [`reduce_scatter`] without waiting.
pub fn reduce_scatter_async(
    output: &Tensor,
    input_list: &[Tensor],
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "reduce_scatter";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    check_list(OP, "input_list", input_list, output, g.size())?;
    op.check_dtype(OP, output.dtype())?;
    let wire = reduce_dtype(output.dtype());
    let send = flatten_from(input_list, wire)?;
    reduce_scatter_staged(OP, &g, output, send, op)
}

/// Reduces `input` (`size × output.numel()` elements) over the group and leaves rank `r` the
/// `r`-th block in `output` (PyTorch's `reduce_scatter_tensor`).
pub fn reduce_scatter_tensor(
    output: &Tensor,
    input: &Tensor,
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| reduce_scatter_tensor_async(output, input, op, group))
}

/// [`reduce_scatter_tensor`] without waiting.
pub fn reduce_scatter_tensor_async(
    output: &Tensor,
    input: &Tensor,
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "reduce_scatter_tensor";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    check_dtype(OP, "input", input, output.dtype())?;
    check_numel(OP, "input", input, output.numel() * g.size())?;
    op.check_dtype(OP, output.dtype())?;
    let send = Staged::new(OP, "input", input, true)?;
    reduce_scatter_staged(OP, &g, output, send, op)
}

fn reduce_scatter_staged(
    op_name: &str,
    g: &ProcessGroup,
    output: &Tensor,
    send: Staged,
    op: ReduceOp,
) -> Result<Work> {
    check_tensor(op_name, "output", output)?;
    let recv = Staged::scratch(output.numel(), send.buf.dtype());
    let c = Collective::ReduceScatter {
        send: send.wire(op_name)?,
        recv: recv.wire(op_name)?,
        op,
    };
    let keep = vec![send.buf.clone(), recv.buf.clone()];
    let (out, size) = (output.clone(), g.size());
    let finish = move || {
        if op == ReduceOp::Avg {
            divide(&recv.buf, size)?;
        }
        unflatten_into(&recv.buf, std::slice::from_ref(&out))
    };
    g.post(c, keep, Some(Box::new(finish)))
}

/// Reduces `tensor` over the group into rank `dst`'s `tensor`; other ranks' tensors are left as
/// they were (PyTorch's `reduce`).
pub fn reduce(
    tensor: &Tensor,
    dst: usize,
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| reduce_async(tensor, dst, op, group))
}

/// [`reduce`] without waiting.
pub fn reduce_async(
    tensor: &Tensor,
    dst: usize,
    op: ReduceOp,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "reduce";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    let root = g.member(OP, "dst", dst)?;
    op.check_dtype(OP, tensor.dtype())?;
    let s = Staged::new(OP, "tensor", tensor, true)?;
    let buf = s.wire(OP)?;
    let keep = vec![s.buf.clone()];
    let (is_root, size) = (g.rank() == Some(root), g.size());
    let finish = move || {
        if !is_root {
            return Ok(());
        }
        if op == ReduceOp::Avg {
            divide(&s.buf, size)?;
        }
        s.write_back()
    };
    g.post(
        Collective::Reduce { buf, root, op },
        keep,
        Some(Box::new(finish)),
    )
}

/// Gathers every rank's `tensor` into rank `dst`'s `gather_list` (one tensor per group rank;
/// `None` on the other ranks) (PyTorch's `gather`).
pub fn gather(
    tensor: &Tensor,
    gather_list: Option<&[Tensor]>,
    dst: usize,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| gather_async(tensor, gather_list, dst, group))
}

/// [`gather`] without waiting.
pub fn gather_async(
    tensor: &Tensor,
    gather_list: Option<&[Tensor]>,
    dst: usize,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "gather";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    let root = g.member(OP, "dst", dst)?;
    let list = root_list(OP, "gather_list", gather_list, g.rank() == Some(root))?;
    let send = Staged::new(OP, "tensor", tensor, false)?;
    let recv = match list {
        Some(l) => {
            check_list(OP, "gather_list", l, tensor, g.size())?;
            Some(Staged::scratch(tensor.numel() * g.size(), tensor.dtype()))
        }
        None => None,
    };
    let c = Collective::Gather {
        send: send.wire(OP)?,
        recv: recv.as_ref().map(|r| r.wire(OP)).transpose()?,
        root,
    };
    let mut keep = vec![send.buf.clone()];
    keep.extend(recv.as_ref().map(|r| r.buf.clone()));
    let outs = list.map(<[Tensor]>::to_vec);
    let finish = move || match (recv, outs) {
        (Some(r), Some(outs)) => unflatten_into(&r.buf, &outs),
        _ => Ok(()),
    };
    g.post(c, keep, Some(Box::new(finish)))
}

/// Scatters rank `src`'s `scatter_list` (one tensor per group rank; `None` on the other ranks)
/// so that rank `r` receives the `r`-th tensor in `tensor` (PyTorch's `scatter`).
pub fn scatter(
    tensor: &Tensor,
    scatter_list: Option<&[Tensor]>,
    src: usize,
    group: Option<&ProcessGroup>,
) -> Result<()> {
    blocking(|| scatter_async(tensor, scatter_list, src, group))
}

/// [`scatter`] without waiting.
pub fn scatter_async(
    tensor: &Tensor,
    scatter_list: Option<&[Tensor]>,
    src: usize,
    group: Option<&ProcessGroup>,
) -> Result<Work> {
    const OP: &str = "scatter";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    let root = g.member(OP, "src", src)?;
    let list = root_list(OP, "scatter_list", scatter_list, g.rank() == Some(root))?;
    let send = match list {
        Some(l) => {
            check_list(OP, "scatter_list", l, tensor, g.size())?;
            Some(flatten_from(l, tensor.dtype())?)
        }
        None => None,
    };
    let recv = Staged::new(OP, "tensor", tensor, false)?;
    let c = Collective::Scatter {
        send: send.as_ref().map(|s| s.wire(OP)).transpose()?,
        recv: recv.wire(OP)?,
        root,
    };
    let mut keep = vec![recv.buf.clone()];
    keep.extend(send.map(|s| s.buf));
    g.post(c, keep, Some(Box::new(move || recv.write_back())))
}

/// Sends `tensor` to rank `dst`, matched by `tag` (PyTorch's `send`).
pub fn send(tensor: &Tensor, dst: usize, group: Option<&ProcessGroup>, tag: i32) -> Result<()> {
    blocking(|| isend(tensor, dst, group, tag))
}

/// [`send`] without waiting (PyTorch's `isend`).
pub fn isend(tensor: &Tensor, dst: usize, group: Option<&ProcessGroup>, tag: i32) -> Result<Work> {
    const OP: &str = "send";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    let peer = g.member(OP, "dst", dst)?;
    check_peer(OP, "dst", &g, peer, tag)?;
    let s = Staged::new(OP, "tensor", tensor, false)?;
    let buf = s.wire(OP)?;
    g.post(
        Collective::Send { buf, peer, tag },
        vec![s.buf.clone()],
        None,
    )
}

/// Receives into `tensor` from rank `src`, matched by `tag` (PyTorch's `recv`); returns `src`.
pub fn recv(tensor: &Tensor, src: usize, group: Option<&ProcessGroup>, tag: i32) -> Result<usize> {
    blocking(|| irecv(tensor, src, group, tag))?;
    Ok(src)
}

/// [`recv`] without waiting (PyTorch's `irecv`).
pub fn irecv(tensor: &Tensor, src: usize, group: Option<&ProcessGroup>, tag: i32) -> Result<Work> {
    const OP: &str = "recv";
    let Some(g) = member_group(OP, group)? else {
        return Ok(skipped(OP));
    };
    let peer = g.member(OP, "src", src)?;
    check_peer(OP, "src", &g, peer, tag)?;
    let s = Staged::new(OP, "tensor", tensor, false)?;
    let buf = s.wire(OP)?;
    let keep = vec![s.buf.clone()];
    g.post(
        Collective::Recv { buf, peer, tag },
        keep,
        Some(Box::new(move || s.write_back())),
    )
}

fn check_peer(op: &str, arg: &str, g: &ProcessGroup, peer: usize, tag: i32) -> Result<()> {
    if Some(peer) == g.rank() {
        return Err(Error::argument(
            op,
            arg,
            "another rank (a process cannot send to or receive from itself)",
            format!("this process's own rank {}", g.ranks()[peer]),
        ));
    }
    if tag < 0 {
        return Err(Error::argument(op, "tag", "a tag >= 0", tag.to_string()));
    }
    Ok(())
}

/// The dtype a reduction of `dtype` travels as (f16/bf16 are summed in f32).
fn reduce_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Checks a per-rank list: `size` tensors of `like`'s dtype and element count.
fn check_list(op: &str, arg: &str, list: &[Tensor], like: &Tensor, size: usize) -> Result<()> {
    if list.len() != size {
        return Err(Error::argument(
            op,
            arg,
            format!("{size} tensors (one per rank of the group)"),
            format!("{} tensors", list.len()),
        ));
    }
    for (i, t) in list.iter().enumerate() {
        let name = format!("{arg}[{i}]");
        check_tensor(op, &name, t)?;
        check_dtype(op, &name, t, like.dtype())?;
        check_numel(op, &name, t, like.numel())?;
    }
    Ok(())
}

/// The root's list argument: required on the root, ignored elsewhere.
fn root_list<'a>(
    op: &str,
    arg: &str,
    list: Option<&'a [Tensor]>,
    is_root: bool,
) -> Result<Option<&'a [Tensor]>> {
    match (is_root, list) {
        (true, None) => Err(Error::argument(
            op,
            arg,
            "a list of tensors on the root rank",
            "None",
        )),
        (true, Some(l)) => Ok(Some(l)),
        (false, _) => Ok(None),
    }
}
