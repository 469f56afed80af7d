//! [`LoopLayout`] and [`StrideClass`]: the loop geometry a compiled kernel is specialised on.

/// How the innermost dimension of one operand steps through memory — the one property of the
/// strides a compiled kernel is specialised on (unit stride: vector loads; zero: a value hoisted
/// out of the inner loop and splatted; anything else: per-element gathers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrideClass {
    /// Stride 1 (adjacent elements).
    Unit,
    /// Stride 0 (a broadcast along the inner dim).
    Zero,
    /// Any other stride (transposed, sliced with a step, negative).
    Strided,
}

impl StrideClass {
    /// The class of an element stride.
    ///
    /// ```
    /// use tensorplay_kernel::spec::StrideClass;
    /// assert_eq!(StrideClass::of(1), StrideClass::Unit);
    /// assert_eq!(StrideClass::of(0), StrideClass::Zero);
    /// assert_eq!(StrideClass::of(-1), StrideClass::Strided);
    /// ```
    pub fn of(stride: isize) -> StrideClass {
        match stride {
            1 => StrideClass::Unit,
            0 => StrideClass::Zero,
            _ => StrideClass::Strided,
        }
    }
}

/// The shape of the loop nest a compiled kernel runs, after the launcher dropped unit dims and
/// merged dims that step uniformly for every operand: how many loop dims there are, how many of
/// them are reduced (0 for pointwise, 1 for softmax rows), where the reduced dims sit, and the
/// [`StrideClass`] of every operand's innermost loop dim (inputs, then outputs). Sizes and
/// strides themselves are runtime arguments, so one layout serves every size.
///
/// ```
/// use tensorplay_kernel::spec::{LoopLayout, StrideClass};
/// let l = LoopLayout { dims: 2, reduced: 0, kept_inner: false, in_place: false,
///                      classes: vec![StrideClass::Unit, StrideClass::Zero] };
/// assert_eq!(l.to_string(), "dims=2 reduced=0 classes=[unit, zero]");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LoopLayout {
    /// Number of loop dims (at least 1).
    pub dims: usize,
    /// How many loop dims are reduced (reductions: at least 1; softmax: 1; else 0).
    pub reduced: usize,
    /// Reductions only. `false`: the reduced dims are the trailing loop dims (rows mode: each
    /// kept point reduces a run, vectorized along the reduced inner dim). `true`: the loop dims
    /// are `[kept outer.., reduced.., kept inner]` (column mode: a vector of adjacent kept points
    /// accumulates together while the reduced dims are walked, for reductions whose reduced dims
    /// are strided, like `sum(dim=0)` of a row-major matrix).
    pub kept_inner: bool,
    /// Pointwise only: some output is the very memory of an input (same address, dtype, shape
    /// and strides), as in an optimizer's `p -= lr * g`. The kernel then reads every input of
    /// an element before it writes any output of it, and a staged kernel writes its outputs
    /// only in its last stage (earlier stages read inputs the stores would overwrite).
    pub in_place: bool,
    /// Innermost-loop-dim class of each operand, inputs then outputs. In rows mode reduction
    /// outputs are written once per kept point and are always `Zero`.
    pub classes: Vec<StrideClass>,
}
