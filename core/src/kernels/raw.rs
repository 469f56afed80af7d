//! Element access through raw pointers: the one audited module where eager elementwise kernels
//! turn tensor addresses into reads and writes.
//!
//! Tensor memory is shared mutable state. Several views may cover the same bytes, an in-place op
//! writes into one of its own inputs, and a fresh output starts uninitialised. Rust references
//! promise more than that (a `&mut [T]` is unique, a `&[T]` is frozen, both point at initialised
//! values), so the loops here only form slices over a run once it is proven safe:
//!
//! - an output run becomes a `&mut [MaybeUninit<O>]` (written, never read) only when it is
//!   disjoint from every input run of the same call;
//! - an output that *is* input 0 (same address, unit stride, same dtype: `a.add_(b)`) becomes one
//!   `&mut [O]` that the loop reads and then overwrites element by element;
//! - everything else (strided or overlapping runs) goes through `ptr::read`/`ptr::write` loops,
//!   which are correct for any overlap.
//!
//! Callers (`map.rs`) provide runs produced by [`Nest`](super::iter::Nest) over tensors whose
//! strides were broadcast to the output's shape; see each function's `# Safety`.

use std::mem::MaybeUninit;
use std::ops::Range;

use tensorplay_ir::DType;
use tensorplay_math::bulk::{BinaryFn, UnaryFn};

use crate::element::Element;

/// A tensor address that pool threads may share. It is only an address: every dereference is an
/// `unsafe` operation whose caller guarantees bounds and that threads touch disjoint outputs.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *mut T);

// SAFETY: `SendPtr` carries no ownership and no references; sending the address to another thread
// is harmless by itself. Every dereference is in an `unsafe` block that justifies the access
// (kernels split output ranges so that no two threads write one element).
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as for `Send`: shared `&SendPtr` only yields copies of the address.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The address `offset` elements from the base.
    ///
    /// # Safety
    /// The result must stay inside (or one past the end of) the allocation the base points into,
    /// as for [`pointer::offset`].
    #[inline(always)]
    pub(crate) unsafe fn at(self, offset: isize) -> *mut T {
        // SAFETY: the caller keeps `offset` inside the allocation.
        unsafe { self.0.offset(offset) }
    }
}

/// One operand of a run: the address of its first element and its stride in elements.
#[derive(Clone, Copy)]
pub(crate) struct Operand<T> {
    pub(crate) ptr: *mut T,
    pub(crate) stride: isize,
}

impl<T> Operand<T> {
    /// The bytes this operand's `len` elements span (a unit- or zero-stride operand), as
    /// addresses.
    fn span(&self, len: usize) -> Range<usize> {
        let start = self.ptr as usize;
        let n = if self.stride == 0 { 1 } else { len };
        start..start + n * size_of::<T>()
    }

    /// Unit stride or a broadcast scalar: the shapes the slice fast paths handle.
    fn is_dense(&self) -> bool {
        self.stride == 0 || self.stride == 1
    }
}

/// True when the output run `o` (unit stride) shares no byte with input run `a` (unit or zero
/// stride) over `len` elements.
fn disjoint<O, A>(o: &Operand<O>, a: &Operand<A>, len: usize) -> bool {
    let (x, y) = (o.span(len), a.span(len));
    x.end <= y.start || y.end <= x.start
}

/// An input run as a value source: a slice for unit stride, a repeated value for stride 0.
enum Src<'a, T> {
    Slice(&'a [T]),
    Scalar(T),
}

impl<T: Copy> Src<'_, T> {
    /// # Safety
    /// `a` is dense, its `len` elements are initialised, live for `'a`, and nobody writes them
    /// meanwhile.
    unsafe fn new<'a>(a: &Operand<T>, len: usize) -> Src<'a, T> {
        if a.stride == 0 {
            // SAFETY: the caller guarantees one readable, initialised element at `a.ptr`.
            Src::Scalar(unsafe { a.ptr.read() })
        } else {
            // SAFETY: the caller guarantees `len` readable, initialised elements that no one
            // writes while the slice lives.
            Src::Slice(unsafe { std::slice::from_raw_parts(a.ptr, len) })
        }
    }
}

/// The output run as write-only slots.
///
/// # Safety
/// `o` has unit stride, its `len` elements are inside one allocation, and no other live reference
/// or thread touches them while the slice lives.
unsafe fn out_slots<'a, O>(o: &Operand<O>, len: usize) -> &'a mut [MaybeUninit<O>] {
    // SAFETY: as the caller guarantees; `MaybeUninit` makes no claim about the current contents.
    unsafe { std::slice::from_raw_parts_mut(o.ptr.cast::<MaybeUninit<O>>(), len) }
}

/// `out[i] = f(a[i])` over one run of `len` elements.
///
/// # Safety
/// For every operand, its `len` elements at its stride lie inside one live allocation of its
/// element type; input elements are initialised; no other thread writes any of them, or reads the
/// output's, during the call. Inputs may overlap the output arbitrarily.
#[inline(always)]
pub(crate) unsafe fn run1<A: Element, O: Element>(
    o: Operand<O>,
    a: Operand<A>,
    len: usize,
    f: &impl Fn(A) -> O,
) {
    if o.stride == 1 && a.is_dense() && disjoint(&o, &a, len) {
        // SAFETY: the output run is unit-stride and disjoint from the input run, so the mutable
        // slots and the input view never alias; bounds and initialisation are the caller's.
        let (out, x) = unsafe { (out_slots(&o, len), Src::new(&a, len)) };
        match x {
            Src::Slice(x) => {
                for (o, &x) in out.iter_mut().zip(x) {
                    o.write(f(x));
                }
            }
            Src::Scalar(x) => out.iter_mut().for_each(|o| {
                o.write(f(x));
            }),
        }
        return;
    }
    for i in 0..len as isize {
        // SAFETY: element `i` of each operand is in bounds (caller); each input element is read
        // into a value before the output element is written, so overlap only orders the accesses.
        unsafe {
            let x = a.ptr.offset(i * a.stride).read();
            o.ptr.offset(i * o.stride).write(f(x));
        }
    }
}

/// `out[i] = f(a[i], b[i])` over one run of `len` elements.
///
/// # Safety
/// As for [`run1`], for all three operands.
#[inline(always)]
pub(crate) unsafe fn run2<A: Element, B: Element, O: Element>(
    o: Operand<O>,
    a: Operand<A>,
    b: Operand<B>,
    len: usize,
    f: &impl Fn(A, B) -> O,
) {
    if o.stride == 1 && a.is_dense() && b.is_dense() && disjoint(&o, &b, len) {
        if disjoint(&o, &a, len) {
            // SAFETY: the output run is unit-stride and disjoint from both input runs; bounds and
            // initialisation are the caller's.
            let (out, x, y) = unsafe { (out_slots(&o, len), Src::new(&a, len), Src::new(&b, len)) };
            match (x, y) {
                (Src::Slice(x), Src::Slice(y)) => {
                    for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
                        o.write(f(x, y));
                    }
                }
                (Src::Slice(x), Src::Scalar(y)) => {
                    for (o, &x) in out.iter_mut().zip(x) {
                        o.write(f(x, y));
                    }
                }
                (Src::Scalar(x), Src::Slice(y)) => {
                    for (o, &y) in out.iter_mut().zip(y) {
                        o.write(f(x, y));
                    }
                }
                (Src::Scalar(x), Src::Scalar(y)) => out.iter_mut().for_each(|o| {
                    o.write(f(x, y));
                }),
            }
            return;
        }
        if a.stride == 1
            && std::ptr::eq(a.ptr.cast_const(), o.ptr.cast::<A>())
            && A::DTYPE == O::DTYPE
        {
            // The in-place case `a.op_(b)`: the output is input `a` itself.
            // SAFETY: `o` and `a` are the same initialised, unit-stride run of one type (equal
            // dtypes mean equal Rust types), so one `&mut [O]` covers both; `b` is disjoint from
            // it. Bounds are the caller's.
            let (out, y) = unsafe {
                (
                    std::slice::from_raw_parts_mut(o.ptr, len),
                    Src::new(&b, len),
                )
            };
            // SAFETY: `e` is an initialised element of type `O`, which is `A`.
            let read = |e: &O| unsafe { (e as *const O).cast::<A>().read() };
            match y {
                Src::Slice(y) => {
                    for (e, &y) in out.iter_mut().zip(y) {
                        *e = f(read(e), y);
                    }
                }
                Src::Scalar(y) => out.iter_mut().for_each(|e| *e = f(read(e), y)),
            }
            return;
        }
    }
    for i in 0..len as isize {
        // SAFETY: element `i` of each operand is in bounds (caller); inputs are read into values
        // before the output element is written, so overlap only orders the accesses.
        unsafe {
            let x = a.ptr.offset(i * a.stride).read();
            let y = b.ptr.offset(i * b.stride).read();
            o.ptr.offset(i * o.stride).write(f(x, y));
        }
    }
}

/// `out[i] = f(a[i], b[i], c[i])` over one run of `len` elements.
///
/// # Safety
/// As for [`run1`], for all four operands.
#[inline(always)]
pub(crate) unsafe fn run3<A: Element, B: Element, C: Element, O: Element>(
    o: Operand<O>,
    a: Operand<A>,
    b: Operand<B>,
    c: Operand<C>,
    len: usize,
    f: &impl Fn(A, B, C) -> O,
) {
    if o.stride == 1
        && a.stride == 1
        && b.is_dense()
        && c.is_dense()
        && disjoint(&o, &a, len)
        && disjoint(&o, &b, len)
        && disjoint(&o, &c, len)
    {
        // SAFETY: the output run is unit-stride and disjoint from every input run; bounds and
        // initialisation are the caller's.
        let (out, x, y, z) = unsafe {
            (
                out_slots(&o, len),
                std::slice::from_raw_parts(a.ptr, len),
                Src::new(&b, len),
                Src::new(&c, len),
            )
        };
        match (y, z) {
            (Src::Slice(y), Src::Slice(z)) => {
                for (((o, &x), &y), &z) in out.iter_mut().zip(x).zip(y).zip(z) {
                    o.write(f(x, y, z));
                }
            }
            // `where(cond, grad, 0)`: one operand is a broadcast scalar.
            (Src::Slice(y), Src::Scalar(z)) => {
                for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
                    o.write(f(x, y, z));
                }
            }
            (Src::Scalar(y), Src::Slice(z)) => {
                for ((o, &x), &z) in out.iter_mut().zip(x).zip(z) {
                    o.write(f(x, y, z));
                }
            }
            (Src::Scalar(y), Src::Scalar(z)) => {
                for (o, &x) in out.iter_mut().zip(x) {
                    o.write(f(x, y, z));
                }
            }
        }
        return;
    }
    for i in 0..len as isize {
        // SAFETY: element `i` of each operand is in bounds (caller); inputs are read into values
        // before the output element is written, so overlap only orders the accesses.
        unsafe {
            let x = a.ptr.offset(i * a.stride).read();
            let y = b.ptr.offset(i * b.stride).read();
            let z = c.ptr.offset(i * c.stride).read();
            o.ptr.offset(i * o.stride).write(f(x, y, z));
        }
    }
}

/// Elements per stack tile of [`run1_buffered`]: 2 KiB of f32, L1-resident.
const TILE: usize = 512;

/// `out[i] = store(k(load(a[i])))` over one run of `len` elements, where `k` is a buffer kernel
/// over f32 values (a math-library kernel, `tensorplay_math::bulk`): the eager form of ops whose
/// f32 definition is such a kernel. A unit-stride f32 run that is its input itself or disjoint
/// from it goes to `k` directly (the kernel allows exactly those two cases); every other run —
/// strided, broadcast, overlapping, or of another dtype — goes through a stack tile that is read
/// completely, computed in place and written back. Both give the same values.
///
/// # Safety
/// As for [`run1`]; `k` must be a kernel with the [`UnaryFn`] contract.
#[inline(always)]
pub(crate) unsafe fn run1_buffered<A: Element, O: Element>(
    o: Operand<O>,
    a: Operand<A>,
    len: usize,
    k: UnaryFn,
    load: &impl Fn(A) -> f32,
    store: &impl Fn(f32) -> O,
) {
    let both_f32 = A::DTYPE == DType::F32 && O::DTYPE == DType::F32;
    let same = std::ptr::eq(o.ptr.cast::<u8>(), a.ptr.cast::<u8>());
    if both_f32 && o.stride == 1 && a.stride == 1 && (same || disjoint(&o, &a, len)) {
        // SAFETY: both runs hold `len` f32 values (the dtypes are f32, so `A` and `O` are f32)
        // at unit stride inside live allocations, the input initialised (caller); they are the
        // same run or disjoint, which is what the kernel accepts.
        unsafe { k(a.ptr.cast::<f32>(), o.ptr.cast::<f32>(), len) };
        return;
    }
    let mut tile = [0.0f32; TILE];
    let mut start = 0;
    while start < len {
        let n = TILE.min(len - start);
        for (j, t) in tile[..n].iter_mut().enumerate() {
            // SAFETY: element `start + j < len` of the input is in bounds and initialised
            // (caller).
            *t = load(unsafe { a.ptr.offset((start + j) as isize * a.stride).read() });
        }
        let p = tile.as_mut_ptr();
        // SAFETY: the tile holds `n <= TILE` initialised f32 values; computing in place (same
        // pointer for input and output) is allowed by the kernel contract.
        unsafe { k(p, p, n) };
        for (j, &t) in tile[..n].iter().enumerate() {
            // SAFETY: element `start + j < len` of the output is in bounds (caller); its inputs
            // were all read into the tile before this write.
            unsafe {
                o.ptr
                    .offset((start + j) as isize * o.stride)
                    .write(store(t))
            };
        }
        start += n;
    }
}

/// `out[i] = store(k(load(a[i]), load(b[i])))` over one run of `len` elements: the binary
/// counterpart of [`run1_buffered`]. Unit-stride f32 runs where the output is disjoint from
/// both inputs or is one of them go to `k` directly; every other run (a broadcast exponent,
/// strides, other dtypes) goes through stack tiles.
///
/// # Safety
/// As for [`run2`]; `k` must be a kernel with the [`BinaryFn`] contract.
#[inline(always)]
pub(crate) unsafe fn run2_buffered<T: Element>(
    o: Operand<T>,
    a: Operand<T>,
    b: Operand<T>,
    len: usize,
    k: BinaryFn,
    load: &impl Fn(T) -> f32,
    store: &impl Fn(f32) -> T,
) {
    let all_f32 = T::DTYPE == DType::F32;
    let same = |p: *const u8| std::ptr::eq(o.ptr.cast::<u8>().cast_const(), p);
    let fits_a = a.stride == 1 && (same(a.ptr.cast::<u8>()) || disjoint(&o, &a, len));
    let fits_b = b.stride == 1 && (same(b.ptr.cast::<u8>()) || disjoint(&o, &b, len));
    if all_f32 && o.stride == 1 && fits_a && fits_b {
        // SAFETY: three f32 runs (the dtypes are f32) of `len` elements at unit stride inside
        // live allocations, the inputs initialised (caller); the output is each input itself or
        // disjoint from it, which the kernel accepts.
        unsafe {
            k(
                a.ptr.cast::<f32>(),
                b.ptr.cast::<f32>(),
                o.ptr.cast::<f32>(),
                len,
            )
        };
        return;
    }
    let (mut ta, mut tb) = ([0.0f32; TILE], [0.0f32; TILE]);
    let mut start = 0;
    while start < len {
        let n = TILE.min(len - start);
        for j in 0..n {
            let i = (start + j) as isize;
            // SAFETY: element `start + j < len` of each input is in bounds and initialised
            // (caller).
            unsafe {
                ta[j] = load(a.ptr.offset(i * a.stride).read());
                tb[j] = load(b.ptr.offset(i * b.stride).read());
            }
        }
        let pa = ta.as_mut_ptr();
        // SAFETY: both tiles hold `n <= TILE` initialised f32 values; writing the result over
        // the first operand is allowed by the kernel contract.
        unsafe { k(pa, tb.as_ptr(), pa, n) };
        for (j, &t) in ta[..n].iter().enumerate() {
            // SAFETY: element `start + j < len` of the output is in bounds (caller); its inputs
            // were read into the tiles before this write.
            unsafe {
                o.ptr
                    .offset((start + j) as isize * o.stride)
                    .write(store(t))
            };
        }
        start += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op<T>(v: &mut [T], stride: isize) -> Operand<T> {
        Operand {
            ptr: v.as_mut_ptr(),
            stride,
        }
    }

    #[test]
    fn disjointness_is_by_bytes() {
        let mut buf = [0f32; 8];
        let p = buf.as_mut_ptr();
        let at = |i: usize, stride| Operand {
            // SAFETY: `i <= 8` stays inside (or one past) `buf`.
            ptr: unsafe { p.add(i) },
            stride,
        };
        assert!(disjoint(&at(0, 1), &at(4, 1), 4));
        assert!(!disjoint(&at(0, 1), &at(3, 1), 4));
        assert!(!disjoint(&at(0, 1), &at(0, 1), 4));
        // A broadcast scalar spans one element.
        assert!(disjoint(&at(0, 1), &at(4, 0), 4));
        assert!(!disjoint(&at(0, 1), &at(3, 0), 4));
    }

    #[test]
    fn in_place_and_overlapping_runs_read_before_writing() {
        // out == a: the in-place fast path.
        let mut a = [1i32, 2, 3, 4];
        let b = [10i32, 20, 30, 40];
        let pa = op(&mut a, 1);
        // SAFETY: every operand covers 4 live, initialised i32s; nothing else touches them.
        unsafe {
            run2(
                pa,
                pa,
                Operand {
                    ptr: b.as_ptr().cast_mut(),
                    stride: 1,
                },
                4,
                &|x, y| x + y,
            )
        };
        assert_eq!(a, [11, 22, 33, 44]);

        // out shifted one element past the input: the raw loop, in order.
        let mut v = [1i32, 2, 3, 4, 5];
        let base = v.as_mut_ptr();
        // SAFETY: elements 0..4 and 1..5 of `v` are live and initialised.
        unsafe {
            let o = Operand {
                ptr: base.add(1),
                stride: 1,
            };
            run1(
                o,
                Operand {
                    ptr: base,
                    stride: 1,
                },
                4,
                &|x: i32| x * 10,
            );
        }
        // Each output reads the value its input held when the loop reached it.
        assert_eq!(v, [1, 10, 100, 1000, 10000]);
    }

    #[test]
    fn fresh_outputs_take_the_slot_path() {
        let mut out = [MaybeUninit::<f64>::uninit(); 3];
        let x = [1.0f64, 2.0, 3.0];
        let c = [true, false, true];
        let o = Operand {
            ptr: out.as_mut_ptr().cast::<f64>(),
            stride: 1,
        };
        let s = [-1.0f64];
        // SAFETY: `out` has 3 writable slots; `c`, `x` have 3 initialised values, `s` one.
        unsafe {
            run3(
                o,
                Operand {
                    ptr: c.as_ptr().cast_mut(),
                    stride: 1,
                },
                Operand {
                    ptr: x.as_ptr().cast_mut(),
                    stride: 1,
                },
                Operand {
                    ptr: s.as_ptr().cast_mut(),
                    stride: 0,
                },
                3,
                &|c: bool, x: f64, s: f64| if c { x } else { s },
            )
        };
        // SAFETY: run3 wrote all three slots.
        let out = out.map(|v| unsafe { v.assume_init() });
        assert_eq!(out, [1.0, -1.0, 3.0]);
    }
}
