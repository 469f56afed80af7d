//! `ConvTranspose2d` (shapes, PyTorch's initialisation bounds, the functional op, state-dict
//! names) and the 1-D / 2-D / 3-D padding layers (values against `nn::pad`, PyTorch's side
//! order, argument errors).

use tensorplay_nn::{
    CircularPad1d, CircularPad3d, ConstantPad1d, ConstantPad3d, ConvTranspose2d,
    ConvTransposeOptions, Forward, Module, ReflectionPad1d, ReflectionPad3d, ReplicationPad1d,
    ReplicationPad3d, ZeroPad1d, ZeroPad3d,
};
use tensorplay_runtime::nn::{self, PadMode};
use tensorplay_runtime::{DType, Result, Tensor, manual_seed};

#[test]
fn conv_transpose2d_layer_has_pytorchs_shapes_init_and_forward() -> Result<()> {
    manual_seed(0);
    let opts = ConvTransposeOptions {
        stride: vec![2, 1],
        padding: vec![1],
        output_padding: vec![1, 0],
        groups: 2,
        ..Default::default()
    };
    let layer = ConvTranspose2d::new(6, 8, [3, 2], opts.clone())?;
    assert_eq!(layer.weight.shape(), &[6, 4, 3, 2]);
    assert_eq!(layer.bias.as_ref().unwrap().shape(), &[8]);
    assert_eq!(
        layer.state_dict().keys().collect::<Vec<_>>(),
        ["weight", "bias"]
    );
    // fan_in = weight.shape[1] * kH * kW = 4 * 3 * 2 (PyTorch's, from the weight tensor).
    let bound = 1.0 / (24f32).sqrt();
    for t in [&layer.weight, layer.bias.as_ref().unwrap()] {
        let v = t.to_vec::<f32>()?;
        assert!(v.iter().all(|x| x.abs() <= bound), "{v:?}");
        assert!(v.iter().any(|x| x.abs() > 0.7 * bound));
    }
    let x = Tensor::randn_seeded(&[2, 6, 4, 5], DType::F32, 1)?;
    let y = layer.forward(&x)?;
    // (4 - 1) * 2 - 2 + 2 + 1 + 1 = 8 rows, (5 - 1) - 2 + 1 + 1 = 4 columns.
    assert_eq!(y.shape(), &[2, 8, 8, 4]);
    let want = nn::conv_transpose2d(
        &x,
        &layer.weight,
        layer.bias.as_ref(),
        &[2, 1],
        &[1],
        &[1, 0],
        2,
        &[1],
    )?;
    assert_eq!(y.to_vec::<f32>()?, want.to_vec::<f32>()?);
    // Unbatched input.
    assert_eq!(layer.forward(&x.select(0, 0)?)?.shape(), &[8, 8, 4]);
    let plain = ConvTranspose2d::new(
        3,
        5,
        [2, 2],
        ConvTransposeOptions {
            bias: false,
            dtype: DType::F64,
            ..Default::default()
        },
    )?;
    assert!(plain.bias.is_none());
    assert_eq!(plain.weight.dtype(), DType::F64);
    assert_eq!(plain.state_dict().keys().collect::<Vec<_>>(), ["weight"]);
    let e = ConvTranspose2d::new(6, 5, [3, 3], opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("ConvTranspose2d") && e.contains("groups"), "{e}");
    Ok(())
}

fn data(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| i as f32).collect(), shape).unwrap()
}

fn vals(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn one_d_padding_layers_take_left_right() -> Result<()> {
    let x = data(&[1, 2, 4]);
    let p = [2, 1];
    let cases: [(Box<dyn Forward>, PadMode, f64); 5] = [
        (Box::new(ZeroPad1d::new(&p)?), PadMode::Constant, 0.0),
        (
            Box::new(ConstantPad1d::new(&p, -2.5)?),
            PadMode::Constant,
            -2.5,
        ),
        (Box::new(ReflectionPad1d::new(&p)?), PadMode::Reflect, 0.0),
        (
            Box::new(ReplicationPad1d::new(&p)?),
            PadMode::Replicate,
            0.0,
        ),
        (Box::new(CircularPad1d::new(&p)?), PadMode::Circular, 0.0),
    ];
    for (layer, mode, value) in &cases {
        let got = layer.forward(&x)?;
        assert_eq!(got.shape(), &[1, 2, 7], "{mode:?}");
        assert_eq!(
            vals(&got),
            vals(&nn::pad(&x, &p, *mode, *value)?),
            "{mode:?}"
        );
    }
    // The first row [0, 1, 2, 3], padded 2 on the left and 1 on the right.
    let row = |t: Tensor| vals(&t)[..7].to_vec();
    assert_eq!(
        row(ReflectionPad1d::new(&p)?.forward(&x)?),
        [2.0, 1.0, 0.0, 1.0, 2.0, 3.0, 2.0]
    );
    assert_eq!(
        row(CircularPad1d::new(&p)?.forward(&x)?),
        [2.0, 3.0, 0.0, 1.0, 2.0, 3.0, 0.0]
    );
    assert_eq!(
        row(ConstantPad1d::new(&p, 9.0)?.forward(&x)?),
        [9.0, 9.0, 0.0, 1.0, 2.0, 3.0, 9.0]
    );
    // One size pads both sides; unbatched [C, L] works; negative zero-padding crops.
    assert_eq!(
        ReplicationPad1d::new(&[3])?
            .forward(&x.select(0, 0)?)?
            .shape(),
        &[2, 10]
    );
    assert_eq!(
        vals(&ZeroPad1d::new(&[-1, 0])?.forward(&x)?)[..3],
        [1.0, 2.0, 3.0]
    );
    let e = ReflectionPad1d::new(&[1, 2, 3, 4]).unwrap_err().to_string();
    assert!(
        e.contains("ReflectionPad1d") && e.contains("left, right"),
        "{e}"
    );
    Ok(())
}

#[test]
fn three_d_padding_layers_take_six_sides_last_dim_first() -> Result<()> {
    let x = data(&[1, 2, 3, 4, 5]);
    // left, right (W: 5), top, bottom (H: 4), front, back (D: 3).
    let p = [1, 2, 0, 3, 2, 1];
    let cases: [(Box<dyn Forward>, PadMode, f64); 5] = [
        (Box::new(ZeroPad3d::new(&p)?), PadMode::Constant, 0.0),
        (
            Box::new(ConstantPad3d::new(&p, 1.5)?),
            PadMode::Constant,
            1.5,
        ),
        (Box::new(ReflectionPad3d::new(&p)?), PadMode::Reflect, 0.0),
        (
            Box::new(ReplicationPad3d::new(&p)?),
            PadMode::Replicate,
            0.0,
        ),
        (Box::new(CircularPad3d::new(&p)?), PadMode::Circular, 0.0),
    ];
    for (layer, mode, value) in &cases {
        let got = layer.forward(&x)?;
        assert_eq!(got.shape(), &[1, 2, 6, 7, 8], "{mode:?}");
        assert_eq!(
            vals(&got),
            vals(&nn::pad(&x, &p, *mode, *value)?),
            "{mode:?}"
        );
    }
    // The front planes are the input's depth 2 and 1 (reflected), then depth 0.
    let y = ReflectionPad3d::new(&p)?.forward(&x)?;
    let at = |t: &Tensor, d: usize| t.select(1, 0).unwrap().select(1, d).unwrap();
    let want = ReflectionPad3d::new(&[1, 2, 0, 3, 0, 0])?.forward(&x)?;
    for (out_d, in_d) in [(0, 2), (1, 1), (2, 0), (5, 1)] {
        assert_eq!(
            vals(&at(&y, out_d)),
            vals(&at(&want, in_d)),
            "depth {out_d}"
        );
    }
    // Unbatched [C, D, H, W]; one size for every side.
    assert_eq!(
        ReplicationPad3d::new(&[1])?
            .forward(&x.select(0, 0)?)?
            .shape(),
        &[2, 5, 6, 7]
    );
    let e = ZeroPad3d::new(&[1, 2, 3, 4]).unwrap_err().to_string();
    assert!(e.contains("ZeroPad3d") && e.contains("front, back"), "{e}");
    // Reflection needs each side smaller than its dim: the error comes from `pad`.
    assert!(
        ReflectionPad3d::new(&[0, 0, 0, 0, 3, 0])?
            .forward(&x)
            .is_err()
    );
    Ok(())
}
