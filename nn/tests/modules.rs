//! Modules: `#[derive(Module)]` naming, the layers' PyTorch names, shapes, initialisations and
//! defaults, modes, device/dtype moves, gradients, optimizers over `parameters()`, and
//! `load_state_dict`'s checks.

use tensorplay_compiler::optim::Sgd;
use tensorplay_nn::{
    Dropout, Embedding, Forward, GELU, LayerNorm, Linear, Module, MultiheadAttention, RMSNorm,
    ReLU, Sequential, SiLU, Sigmoid, StateDict, Tanh, TensorKind, functional_call,
};
use tensorplay_runtime::{DType, Device, Result, Tensor, manual_seed};

fn keys(m: &dyn Module) -> Vec<String> {
    let mut out = Vec::new();
    m.visit("", &mut |n, _, _| out.push(n.to_string()));
    out
}

#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Attn {
    qkv: Linear,
    proj: Option<Linear>,
}

#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Block {
    attn: Attn,
    mlp: Sequential,
    drop: Dropout,
}

#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Gpt {
    wte: Embedding,
    blocks: Vec<Block>,
    #[buffer]
    mask: Tensor,
    extra: Vec<Tensor>,
    bias: Option<Tensor>,
    #[skip]
    note: std::collections::HashMap<String, u32>,
    n_layer: usize,
    dims: Vec<usize>,
}

/// A tuple struct with its own mode flag.
#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Pair(Linear, #[buffer] Tensor);

#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Flagged {
    inner: Dropout,
    training: bool,
}

fn block(with_proj: bool) -> Result<Block> {
    Ok(Block {
        attn: Attn {
            qkv: Linear::new(4, 12, true)?,
            proj: with_proj.then(|| Linear::new(4, 4, false)).transpose()?,
        },
        mlp: Sequential::new()
            .append(Linear::new(4, 8, true)?)
            .append(GELU::new())
            .append(Linear::new(8, 4, true)?),
        drop: Dropout::new(0.1)?,
    })
}

fn gpt() -> Result<Gpt> {
    Ok(Gpt {
        wte: Embedding::new(10, 4)?,
        blocks: vec![block(true)?, block(false)?],
        mask: Tensor::ones(&[3, 3], DType::Bool),
        extra: vec![
            Tensor::zeros(&[2], DType::F32).requires_grad_(true)?,
            Tensor::zeros(&[1], DType::F32).requires_grad_(true)?,
        ],
        bias: None,
        note: Default::default(),
        n_layer: 2,
        dims: vec![4],
    })
}

#[test]
fn derived_modules_name_tensors_as_pytorch_prints_them() -> Result<()> {
    let g = gpt()?;
    let mlp = |b: usize| {
        [
            format!("blocks.{b}.mlp.0.weight"),
            format!("blocks.{b}.mlp.0.bias"),
            format!("blocks.{b}.mlp.2.weight"),
            format!("blocks.{b}.mlp.2.bias"),
        ]
    };
    let mut want = vec![
        "wte.weight".to_string(),
        "blocks.0.attn.qkv.weight".into(),
        "blocks.0.attn.qkv.bias".into(),
        "blocks.0.attn.proj.weight".into(),
    ];
    want.extend(mlp(0));
    want.extend([
        "blocks.1.attn.qkv.weight".into(),
        "blocks.1.attn.qkv.bias".into(),
    ]);
    want.extend(mlp(1));
    want.extend(["mask".into(), "extra.0".into(), "extra.1".into()]);
    assert_eq!(keys(&g), want);
    assert_eq!(g.state_dict().keys().collect::<Vec<_>>(), want);
    assert_eq!(g.named_buffers().len(), 1);
    assert_eq!(g.named_buffers()[0].0, "mask");
    assert_eq!(g.named_parameters().len(), want.len() - 1);
    let kinds: Vec<TensorKind> = {
        let mut k = Vec::new();
        g.visit("", &mut |_, _, kind| k.push(kind));
        k
    };
    assert_eq!(
        kinds.iter().filter(|&&k| k == TensorKind::Buffer).count(),
        1
    );
    // 10*4 + per block (12*4 + 12 [+ 4*4] + 4*8 + 8 + 8*4 + 4) + extra 2 + 1.
    assert_eq!(g.num_parameters(), 40 + (136 + 16) + 136 + 3);
    let children: Vec<String> = g.children().into_iter().map(|(n, _)| n).collect();
    assert_eq!(children, ["wte", "blocks"]);
    let b1: Vec<String> = g.blocks[1]
        .attn
        .children()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(b1, ["qkv"]); // an absent optional child is not listed
    assert_eq!(
        keys(&Pair(
            Linear::new(2, 2, false)?,
            Tensor::zeros(&[1], DType::F32)
        )),
        ["0.weight", "1"]
    );
    let _ = (&g.note, g.n_layer, &g.dims, &g.bias);
    Ok(())
}

#[test]
fn train_and_eval_reach_every_module() -> Result<()> {
    let mut g = gpt()?;
    assert!(g.is_training() && g.blocks[0].drop.training);
    g.eval();
    assert!(!g.is_training());
    assert!(
        g.blocks
            .iter()
            .all(|b| !b.drop.training && b.attn.mode().is_none())
    );
    // Layers without a mode (linear, activations) report none; a model combines its parts'.
    assert_eq!(g.blocks[0].mlp.mode(), None);
    assert_eq!(g.wte.mode(), None);
    assert_eq!(g.mode(), Some(false));
    g.blocks[1].train();
    assert!(g.is_training() && g.blocks[1].drop.training && !g.blocks[0].drop.training);
    let mut f = Flagged {
        inner: Dropout::new(0.5)?,
        training: true,
    };
    f.eval();
    assert!(!f.training && !f.inner.training && !f.is_training());
    // Dropout in eval mode is the identity; in training it zeroes about p of the elements.
    let x = Tensor::ones(&[4000], DType::F32);
    assert!(f.inner.forward(&x)?.equal(&x)?);
    f.train();
    let kept = f
        .inner
        .forward(&x)?
        .to_vec::<f32>()?
        .iter()
        .filter(|&&v| v == 2.0)
        .count();
    assert!((1800..2200).contains(&kept), "{kept}");
    Ok(())
}

/// Mean and variance of a tensor's values.
fn moments(t: &Tensor) -> Result<(f64, f64)> {
    let v = t.to_vec_f64()?;
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
    Ok((mean, var))
}

#[test]
fn layers_have_pytorchs_shapes_initialisations_and_defaults() -> Result<()> {
    manual_seed(0);
    let lin = Linear::new(64, 300, true)?;
    assert_eq!(lin.weight.shape(), &[300, 64]);
    let bound = 1.0 / 8.0; // 1/sqrt(64)
    for t in [&lin.weight, lin.bias.as_ref().unwrap()] {
        let v = t.to_vec::<f32>()?;
        assert!(v.iter().all(|x| x.abs() <= bound as f32));
        assert!(v.iter().any(|x| x.abs() > 0.9 * bound as f32));
    }
    let (mean, var) = moments(&lin.weight)?;
    // uniform(-b, b): variance b^2 / 3.
    assert!(
        mean.abs() < 0.01 && (var / (bound * bound / 3.0) - 1.0).abs() < 0.05,
        "{mean} {var}"
    );
    assert!(Linear::new(3, 2, false)?.bias.is_none());
    assert!(Linear::with_dtype(3, 2, true, DType::I64).is_err());
    assert_eq!(
        Linear::with_dtype(3, 2, true, DType::F64)?.weight.dtype(),
        DType::F64
    );

    let emb = Embedding::new(100, 50)?;
    let (mean, var) = moments(&emb.weight)?;
    assert!(
        mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
        "{mean} {var}"
    );
    let padded = Embedding::with_options(5, 3, Some(2), DType::F32)?;
    assert_eq!(padded.weight.select(0, 2)?.to_vec::<f32>()?, [0.0; 3]);
    assert!(Embedding::with_options(5, 3, Some(5), DType::F32).is_err());

    let ln = LayerNorm::new(&[6])?;
    assert_eq!(ln.eps, 1e-5);
    assert_eq!(ln.weight.as_ref().unwrap().to_vec::<f32>()?, [1.0; 6]);
    assert_eq!(ln.bias.as_ref().unwrap().to_vec::<f32>()?, [0.0; 6]);
    assert_eq!(
        LayerNorm::with_options(&[6], 1e-5, true, false, DType::F32)?
            .state_dict()
            .len(),
        1
    );
    assert_eq!(
        LayerNorm::with_options(&[6], 1e-5, false, true, DType::F32)?
            .state_dict()
            .len(),
        0
    );
    let rms = RMSNorm::new(&[6])?;
    assert_eq!(
        (rms.eps, rms.state_dict().keys().collect::<Vec<_>>()),
        (None, vec!["weight"])
    );

    let mha = MultiheadAttention::with_options(6, 3, true, false, DType::F32)?;
    let shapes: Vec<(String, Vec<usize>)> = mha
        .state_dict()
        .iter()
        .map(|(n, t)| (n.to_string(), t.shape().to_vec()))
        .collect();
    let want: Vec<(String, Vec<usize>)> = [
        ("in_proj_weight", vec![18, 6]),
        ("in_proj_bias", vec![18]),
        ("out_proj.weight", vec![6, 6]),
        ("out_proj.bias", vec![6]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_string(), s))
    .collect();
    assert_eq!(shapes, want);
    assert_eq!(
        mha.in_proj_bias.as_ref().unwrap().to_vec::<f32>()?,
        [0.0; 18]
    );
    assert_eq!(
        mha.out_proj.bias.as_ref().unwrap().to_vec::<f32>()?,
        [0.0; 6]
    );
    let xavier = (6.0f32 / 24.0).sqrt();
    assert!(
        mha.in_proj_weight
            .to_vec::<f32>()?
            .iter()
            .all(|w| w.abs() <= xavier)
    );
    // [L, N, E] by default; unbatched [L, E] too.
    assert_eq!(
        mha.forward(&Tensor::ones(&[5, 2, 6], DType::F32))?.shape(),
        &[5, 2, 6]
    );
    assert_eq!(
        mha.forward(&Tensor::ones(&[5, 6], DType::F32))?.shape(),
        &[5, 6]
    );
    let err = mha
        .forward(&Tensor::ones(&[5, 2, 4], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("MultiheadAttention") && err.contains("last dim 6"),
        "{err}"
    );
    Ok(())
}

#[test]
fn activation_modules_match_the_tensor_ops() -> Result<()> {
    let x = Tensor::randn_seeded(&[64], DType::F32, 1)?;
    let layers: Vec<(Box<dyn Forward>, Tensor)> = vec![
        (Box::new(ReLU::new()), x.relu()?),
        (Box::new(GELU::new()), x.gelu("none")?),
        (Box::new(GELU::tanh()), x.gelu("tanh")?),
        (Box::new(SiLU::new()), x.silu()?),
        (Box::new(Tanh::new()), x.tanh()?),
        (Box::new(Sigmoid::new()), x.sigmoid()?),
    ];
    for (i, (layer, want)) in layers.iter().enumerate() {
        assert!(layer.forward(&x)?.equal(want)?, "activation {i}");
    }
    assert_eq!(ReLU::new().state_dict().len(), 0);
    Ok(())
}

#[test]
fn optimizers_train_a_module_through_its_parameter_handles() -> Result<()> {
    manual_seed(5);
    let mlp = Sequential::new()
        .append(Linear::new(3, 16, true)?)
        .append(Tanh::new())
        .append(Linear::new(16, 1, true)?);
    let x = Tensor::randn_seeded(&[32, 3], DType::F32, 2)?;
    let y = x.sum(&[1], true)?.sin()?;
    let mut opt = Sgd::new(mlp.parameters(), 0.1, 0.9)?;
    let loss = |m: &Sequential| -> Result<Tensor> {
        let d = m.forward(&x)?.sub(&y)?;
        d.mul(&d)?.mean_all()
    };
    let first = loss(&mlp)?.item::<f32>()?;
    for _ in 0..50 {
        mlp.zero_grad();
        assert!(mlp.parameters().iter().all(|p| p.grad().is_none()));
        loss(&mlp)?.backward()?;
        opt.step()?;
    }
    let last = loss(&mlp)?.item::<f32>()?;
    assert!(last < 0.5 * first, "{first} -> {last}");
    Ok(())
}

#[test]
fn to_dtype_and_to_device_convert_parameters_and_keep_them_trainable() -> Result<()> {
    let mut g = gpt()?;
    g.to_dtype(DType::F64)?;
    for (n, t) in g.state_dict().iter() {
        let want = if n == "mask" { DType::Bool } else { DType::F64 };
        assert_eq!(t.dtype(), want, "{n}");
    }
    assert!(
        g.parameters()
            .iter()
            .all(|p| p.requires_grad() && p.is_leaf())
    );
    assert!(g.to_dtype(DType::I32).is_err());
    g.to_device(Device::Cpu)?;
    let y = g.blocks[0]
        .mlp
        .forward(&Tensor::ones(&[2, 4], DType::F64))?;
    y.sum_all()?.backward()?;
    assert!(
        g.blocks[0]
            .mlp
            .parameters()
            .iter()
            .all(|p| p.grad().is_some())
    );
    g.zero_grad();
    assert!(g.parameters().iter().all(|p| p.grad().is_none()));
    Ok(())
}

#[test]
fn load_state_dict_reports_every_problem_and_changes_nothing_on_failure() -> Result<()> {
    let mut g = gpt()?;
    let before = g.state_dict().to_dtype(DType::F64)?; // copies
    let mut sd = StateDict::new();
    for (n, t) in gpt()?.state_dict() {
        sd.insert(n, t);
    }
    sd.remove("wte.weight");
    sd.insert("blocks.0.attn.qkv.bias", Tensor::zeros(&[11], DType::F32));
    sd.insert("blocks.1.mlp.2.bias", Tensor::zeros(&[4], DType::F64));
    sd.insert("head.weight", Tensor::zeros(&[1], DType::F32));
    let err = g.load_state_dict(&sd, true).unwrap_err().to_string();
    for part in [
        "load_state_dict",
        "missing keys: wte.weight",
        "unexpected keys: head.weight",
        "blocks.0.attn.qkv.bias: shape mismatch: expected [12], got [11]",
        "blocks.1.mlp.2.bias: dtype mismatch: expected f32, got f64",
    ] {
        assert!(err.contains(part), "`{part}` not in: {err}");
    }
    let unchanged = |g: &Gpt| -> Result<bool> {
        for (n, t) in g.state_dict().to_dtype(DType::F64)?.iter() {
            if !t.equal(before.get(n).unwrap())? {
                return Ok(false);
            }
        }
        Ok(true)
    };
    assert!(unchanged(&g)?);
    // Non-strict: missing and unexpected keys are reported, mismatches still refused.
    assert!(g.load_state_dict(&sd, false).is_err());
    assert!(unchanged(&g)?);
    sd.remove("blocks.0.attn.qkv.bias");
    sd.insert("blocks.1.mlp.2.bias", Tensor::full(&[4], 7.0, DType::F32));
    let report = g.load_state_dict(&sd, false)?;
    assert_eq!(
        report.missing_keys,
        ["wte.weight", "blocks.0.attn.qkv.bias"]
    );
    assert_eq!(report.unexpected_keys, ["head.weight"]);
    assert_eq!(
        g.blocks[1]
            .mlp
            .state_dict()
            .get("2.bias")
            .unwrap()
            .to_vec::<f32>()?,
        [7.0; 4]
    );
    // Loaded in place: the handles an optimizer holds see the new values.
    let held = g.parameters();
    let other = gpt()?;
    g.load_state_dict(&other.state_dict(), true)?;
    assert!(held[0].equal(&other.wte.weight)? && !held[0].same(&other.wte.weight));
    Ok(())
}

#[test]
fn functional_call_swaps_parameters_in_and_back() -> Result<()> {
    let mut lin = Linear::new(2, 1, true)?;
    let own = lin.parameters();
    let w = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?;
    let b = Tensor::from_vec(vec![0.5f32], &[1])?;
    let x = Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?;
    let y = functional_call(&mut lin, &[w.clone(), b.clone()], |m| m.forward(&x))?;
    assert_eq!(y.to_vec::<f32>()?, [11.5]);
    assert!(lin.weight.same(&own[0]) && lin.bias.as_ref().unwrap().same(&own[1]));
    // Restored after an error too; wrong arguments are named.
    let failed: Result<()> = functional_call(&mut lin, &[w.clone(), b.clone()], |_| {
        Err(tensorplay_runtime::Error::Autograd("boom".into()))
    });
    assert!(failed.is_err() && lin.weight.same(&own[0]));
    let err = functional_call(&mut lin, std::slice::from_ref(&w), |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("2 tensors"), "{err}");
    let err = functional_call(&mut lin, &[b.clone(), b], |_| Ok(()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("weight: expected [1, 2] f32, got [1] f32"),
        "{err}"
    );
    Ok(())
}

#[test]
fn attention_masks_follow_pytorchs_module_convention() -> Result<()> {
    let mha = MultiheadAttention::new(8, 2, true)?;
    let x = Tensor::randn_seeded(&[2, 5, 8], DType::F32, 3)?;
    let close = |a: &Tensor, b: &Tensor| a.allclose(b, 1e-5, 1e-6);
    let causal = mha.attend(&x, &x, &x, None, true)?;
    // A bool mask is true where attending is not allowed (PyTorch's MultiheadAttention).
    let blocked = Tensor::ones(&[5, 5], DType::Bool).triu(1)?;
    assert!(close(
        &mha.attend(&x, &x, &x, Some(&blocked), false)?,
        &causal
    )?);
    // A float mask is added to the scores.
    let minus_inf = Tensor::full(&[5, 5], f64::NEG_INFINITY, DType::F32);
    let additive = Tensor::where_cond(&blocked, &minus_inf, &Tensor::zeros(&[5, 5], DType::F32))?;
    assert!(close(
        &mha.attend(&x, &x, &x, Some(&additive), false)?,
        &causal
    )?);
    // One mask per batch element and head: [N * num_heads, L, S].
    let per_head = blocked.unsqueeze(0)?.expand(&[4, 5, 5])?.contiguous()?;
    assert!(close(
        &mha.attend(&x, &x, &x, Some(&per_head), false)?,
        &causal
    )?);
    // Without a mask every position sees the whole sequence.
    assert!(!close(&mha.forward(&x)?, &causal)?);
    Ok(())
}

/// PyTorch's `dropout` argument: attention probabilities are dropped in training mode only.
#[test]
fn attention_dropout_is_active_in_training_mode_only() -> Result<()> {
    let mut mha = MultiheadAttention::new(8, 2, true)?.with_dropout(0.5)?;
    assert_eq!(mha.mode(), Some(true));
    let x = Tensor::randn_seeded(&[2, 5, 8], DType::F32, 3)?;
    let plain = MultiheadAttention {
        dropout: 0.0,
        ..mha.clone()
    }
    .forward(&x)?;
    assert!(!mha.forward(&x)?.allclose(&plain, 1e-5, 1e-6)?);
    mha.eval();
    assert!(mha.forward(&x)?.equal(&plain)?);
    let err = MultiheadAttention::new(8, 2, true)?
        .with_dropout(-0.5)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("MultiheadAttention") && err.contains("dropout"),
        "{err}"
    );
    Ok(())
}

#[test]
fn padding_and_upsampling_layers_hold_no_tensors_and_match_the_functions() -> Result<()> {
    use tensorplay_nn::{ReflectionPad2d, Upsample, ZeroPad2d};
    use tensorplay_runtime::nn::{self, InterpolateMode, PadMode};
    let net = Sequential::new()
        .append(ReflectionPad2d::new(&[1, 2, 0, 1])?)
        .append(Upsample::scale(&[2.0, 1.5], InterpolateMode::Bilinear))
        .append(ZeroPad2d::new(&[-1])?);
    assert!(keys(&net).is_empty());
    let x = Tensor::randn_seeded(&[2, 3, 4, 5], DType::F32, 3)?;
    let want = nn::pad(&x, &[1, 2, 0, 1], PadMode::Reflect, 0.0)?;
    let want = nn::interpolate(
        &want,
        None,
        Some(&[2.0, 1.5]),
        InterpolateMode::Bilinear,
        None,
        None,
    )?;
    let want = nn::pad(&want, &[-1; 4], PadMode::Constant, 0.0)?;
    let got = net.forward(&x)?;
    assert_eq!(got.shape(), &[2, 3, 8, 10]);
    assert_eq!(got.to_vec::<f32>()?, want.to_vec::<f32>()?);
    assert!(ReflectionPad2d::new(&[1, 2]).is_err());
    // As PyTorch's, a pad that adds nothing (or only crops) still returns a new tensor.
    for (p, mode) in [
        (vec![0, 0], PadMode::Constant),
        (vec![-1, 0], PadMode::Constant),
        (vec![0, 0, 0, 0], PadMode::Reflect),
    ] {
        nn::pad(&x, &p, mode, 0.0)?.fill_(7.0)?;
    }
    assert!(x.to_vec::<f32>()?.iter().all(|&v| v != 7.0));
    Ok(())
}
