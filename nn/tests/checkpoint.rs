//! Checkpoints: a state dict PyTorch wrote (`scripts/parity/record_nn_checkpoint.py`) loads
//! into the same architecture built with `#[derive(Module)]` and gives PyTorch's outputs; every
//! dtype reads back bit for bit; state dicts and optimizer states round-trip through files.

use std::path::PathBuf;

use half::{bf16, f16};
use tensorplay_compiler::optim::{Adam, AdamOptions, Optimizer};
use tensorplay_nn::{
    Embedding, Forward, GELU, LayerNorm, Linear, Module, MultiheadAttention, RMSNorm, Sequential,
    StateDict, load_optimizer_safetensors, load_safetensors, save_optimizer_safetensors,
    save_safetensors,
};
use tensorplay_runtime::{DType, Result, Tensor, manual_seed};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tensorplay_nn_{}_{name}", std::process::id()))
}

/// `Net` of the recording script, field for field.
#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Net {
    #[buffer]
    scale: Tensor,
    #[buffer]
    offset: Tensor,
    emb: Embedding,
    norm: LayerNorm,
    attn: MultiheadAttention,
    blocks: Vec<Sequential>,
    rms: RMSNorm,
    head: Linear,
}

impl Net {
    fn new() -> Result<Net> {
        let mlp = |gelu: GELU| -> Result<Sequential> {
            Ok(Sequential::new()
                .append(Linear::new(8, 12, true)?)
                .append(gelu)
                .append(Linear::new(12, 8, true)?))
        };
        Ok(Net {
            scale: Tensor::ones(&[5], DType::F32),
            offset: Tensor::zeros(&[1], DType::I64),
            emb: Embedding::new(16, 8)?,
            norm: LayerNorm::new(&[8])?,
            attn: MultiheadAttention::new(8, 2, true)?,
            blocks: vec![mlp(GELU::tanh())?, mlp(GELU::new())?],
            rms: RMSNorm::new(&[8])?,
            head: Linear::new(8, 5, true)?,
        })
    }

    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let h = self.norm.forward(&self.emb.forward(ids)?)?;
        let l = ids.shape()[1];
        // PyTorch's MultiheadAttention mask: true above the diagonal = may not attend.
        let mask = Tensor::ones(&[l, l], DType::Bool).triu(1)?;
        let mut h = h.add(&self.attn.attend(&h, &h, &h, Some(&mask), false)?)?;
        for block in &self.blocks {
            h = h.add(&block.forward(&h)?)?;
        }
        self.head
            .forward(&self.rms.forward(&h)?)?
            .mul(&self.scale)?
            .add(&self.offset)
    }
}

#[test]
fn a_pytorch_state_dict_loads_and_gives_pytorchs_outputs() -> Result<()> {
    let mut net = Net::new()?;
    let file = load_safetensors(data("torch_net.safetensors"))?;
    // PyTorch's state_dict() order (own buffers first, then the children in registration order)
    // is the derived struct's field order; the file keeps the names (sorted by name).
    let ours: Vec<String> = net.state_dict().keys().map(String::from).collect();
    assert_eq!(ours[..3], ["scale", "offset", "emb.weight"]);
    assert_eq!(
        ours[9..13],
        [
            "blocks.0.0.weight",
            "blocks.0.0.bias",
            "blocks.0.2.weight",
            "blocks.0.2.bias"
        ]
    );
    let mut sorted = ours.clone();
    sorted.sort();
    assert_eq!(sorted, file.keys().collect::<Vec<_>>());
    let report = net.load_safetensors(data("torch_net.safetensors"), true)?;
    assert!(report.missing_keys.is_empty() && report.unexpected_keys.is_empty());
    for (name, t) in file.iter() {
        assert!(net.state_dict().get(name).unwrap().equal(t)?, "{name}");
    }
    net.eval();
    let io = load_safetensors(data("torch_net_io.safetensors"))?;
    let out = net.forward(io.get("ids").unwrap())?;
    let want = io.get("out").unwrap();
    assert_eq!(out.shape(), want.shape());
    let (got, want) = (out.to_vec::<f32>()?, want.to_vec::<f32>()?);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= 2e-5 * (1.0 + w.abs()),
            "out[{i}]: {g} vs PyTorch {w}"
        );
    }
    // The parameters stay trainable leaves after the load.
    assert!(
        net.parameters()
            .iter()
            .all(|p| p.requires_grad() && p.is_leaf())
    );
    Ok(())
}

#[test]
fn every_dtype_reads_back_bit_for_bit() -> Result<()> {
    let io = load_safetensors(data("torch_net_io.safetensors"))?;
    let get = |k: &str| io.get(k).unwrap().clone();
    assert_eq!(get("dtype.f32").to_vec::<f32>()?, [1.5, -2.25, 3.0e-3]);
    assert_eq!(get("dtype.f64").to_vec::<f64>()?, [1.0 / 3.0, -1e300]);
    let f16s: Vec<f16> = [0.5, -65504.0, 6.1e-5].map(f16::from_f64).to_vec();
    assert_eq!(get("dtype.f16").to_vec::<f16>()?, f16s);
    let bf16s: Vec<bf16> = [1.0, -3.0e38, 0.0078125].map(bf16::from_f64).to_vec();
    assert_eq!(get("dtype.bf16").to_vec::<bf16>()?, bf16s);
    assert_eq!(get("dtype.i64").shape(), &[2, 2]);
    assert_eq!(
        get("dtype.i64").to_vec::<i64>()?,
        [-(1 << 62), 7, 0, 1 << 40]
    );
    assert_eq!(get("dtype.i32").to_vec::<i32>()?, [i32::MIN, i32::MAX]);
    assert_eq!(get("dtype.bool").to_vec::<bool>()?, [true, false, true]);

    // And every dtype writes and reads back unchanged (a non-contiguous view too).
    let path = scratch("dtypes.safetensors");
    let mut all = StateDict::new();
    for (k, t) in io.iter().filter(|(k, _)| k.starts_with("dtype.")) {
        all.insert(k, t.clone());
    }
    let t = Tensor::randn_seeded(&[3, 4], DType::F32, 5)?.transpose(0, 1)?;
    all.insert("transposed", t.clone());
    save_safetensors(&all, &path)?;
    let back = load_safetensors(&path)?;
    std::fs::remove_file(&path).ok();
    let mut names: Vec<&str> = all.keys().collect();
    names.sort();
    assert_eq!(back.keys().collect::<Vec<_>>(), names);
    for (k, t) in all.iter() {
        let b = back.get(k).unwrap();
        assert_eq!((b.dtype(), b.shape()), (t.dtype(), t.shape()), "{k}");
        assert!(b.equal(t)?, "{k}");
    }
    Ok(())
}

#[test]
fn a_saved_model_loads_into_a_fresh_one_with_the_same_outputs() -> Result<()> {
    manual_seed(3);
    let net = Net::new()?;
    let path = scratch("roundtrip.safetensors");
    net.save_safetensors(&path)?;
    manual_seed(4);
    let mut fresh = Net::new()?;
    let ids = Tensor::from_vec(vec![1i64, 5, 9, 2, 0, 15], &[1, 6])?;
    assert!(!fresh.forward(&ids)?.equal(&net.forward(&ids)?)?);
    fresh.load_safetensors(&path, true)?;
    std::fs::remove_file(&path).ok();
    assert!(fresh.forward(&ids)?.equal(&net.forward(&ids)?)?);
    Ok(())
}

#[test]
fn unreadable_files_are_clear_errors() -> Result<()> {
    let missing = load_safetensors(scratch("does_not_exist.safetensors")).unwrap_err();
    assert!(
        missing.to_string().contains("load_safetensors"),
        "{missing}"
    );
    let garbage = scratch("garbage.safetensors");
    std::fs::write(&garbage, b"not a safetensors file").unwrap();
    let err = load_safetensors(&garbage).unwrap_err().to_string();
    std::fs::remove_file(&garbage).ok();
    assert!(err.contains("a readable safetensors file"), "{err}");
    // A model checkpoint is not an optimizer checkpoint.
    let model = scratch("not_optim.safetensors");
    save_safetensors(&Linear::new(2, 2, true)?.state_dict(), &model)?;
    let err = load_optimizer_safetensors(&model).unwrap_err().to_string();
    std::fs::remove_file(&model).ok();
    assert!(err.contains("save_optimizer_safetensors"), "{err}");
    Ok(())
}

/// Ten Adam steps on `net` for a fixed loss, returning the losses.
fn train(net: &Net, opt: &mut Adam, ids: &Tensor, steps: usize) -> Result<Vec<f32>> {
    let mut losses = Vec::new();
    for _ in 0..steps {
        opt.zero_grad();
        let loss = net.forward(ids)?.mul(&net.forward(ids)?)?.mean_all()?;
        loss.backward()?;
        opt.step()?;
        losses.push(loss.item::<f32>()?);
    }
    Ok(losses)
}

#[test]
fn model_and_optimizer_checkpoints_resume_the_same_trajectory() -> Result<()> {
    let ids = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 9, 2, 6], &[2, 4])?;
    let options = AdamOptions {
        lr: 1e-2,
        weight_decay: 0.01,
        amsgrad: true,
        ..AdamOptions::default()
    };
    manual_seed(11);
    let net = Net::new()?;
    let mut opt = Adam::with_options(net.parameters(), options)?;
    train(&net, &mut opt, &ids, 4)?;
    let (model_file, optim_file) = (scratch("model.safetensors"), scratch("optim.safetensors"));
    net.save_safetensors(&model_file)?;
    save_optimizer_safetensors(&opt.state_dict(), &optim_file)?;
    let straight = train(&net, &mut opt, &ids, 6)?;

    manual_seed(12);
    let mut resumed = Net::new()?;
    resumed.load_safetensors(&model_file, true)?;
    let mut opt2 = Adam::with_options(resumed.parameters(), AdamOptions::default())?;
    opt2.load_state_dict(&load_optimizer_safetensors(&optim_file)?)?;
    std::fs::remove_file(&model_file).ok();
    std::fs::remove_file(&optim_file).ok();
    assert_eq!(opt2.lr(), 1e-2);
    assert_eq!(opt2.state_dict().scalar("state.0.step"), Some(4.0));
    assert_eq!(train(&resumed, &mut opt2, &ids, 6)?, straight);
    Ok(())
}
