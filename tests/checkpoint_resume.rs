//! Checkpoint and resume of the examples' transformer (`examples/common/gpt.rs`): a run
//! checkpointed halfway (model state dict and Adam state, as safetensors) and resumed by a
//! fresh model and optimizer repeats the uninterrupted run's losses bit for bit, eagerly and
//! compiled; resuming without the optimizer's state does not.

// The examples' helpers this test does not call (`steps_from_env`, `Trainer::compiled`).
#[allow(dead_code)]
#[path = "../examples/common/gpt.rs"]
mod gpt;

use std::ops::Range;
use std::path::{Path, PathBuf};

use gpt::{Config, Gpt, Trainer, batch, setup};
use tensorplay::Result;
use tensorplay::nn::Module;

const STEPS: usize = 6;
const SAVE_AT: usize = 3;

/// The losses of `t` on the sampler's steps `steps` (batch 4).
fn train(t: &mut Trainer, data: &[i64], c: Config, steps: Range<usize>) -> Result<Vec<f32>> {
    steps
        .map(|step| {
            let (ids, targets) = batch(data, step, 4, c.context)?;
            t.step(ids, targets)?.item::<f32>()
        })
        .collect()
}

/// A directory under the temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "tensorplay-checkpoint-resume-{}-{tag}",
            std::process::id()
        ));
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// The uninterrupted losses, the losses of a fresh trainer resumed from the checkpoint, and
/// those of one that loaded only the model (not the optimizer's moments and step counts).
fn runs(compiled: bool, dir: &Path) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (data, c) = setup();
    let mut first = Trainer::new(Gpt::new(c, 0)?, compiled)?;
    let mut losses = train(&mut first, &data, c, 0..SAVE_AT)?;
    first.save(dir)?;
    losses.extend(train(&mut first, &data, c, SAVE_AT..STEPS)?);

    let mut resumed = Trainer::new(Gpt::new(c, 1000)?, compiled)?;
    assert!(
        !resumed.model.parameters()[0].equal(&first.model.parameters()[0])?,
        "the fresh model starts from other weights"
    );
    resumed.load(dir)?;
    let resumed_losses = train(&mut resumed, &data, c, SAVE_AT..STEPS)?;

    let mut model_only = Trainer::new(Gpt::new(c, 1000)?, compiled)?;
    model_only
        .model
        .load_safetensors(dir.join("model.safetensors"), true)?;
    let model_only_losses = train(&mut model_only, &data, c, SAVE_AT..STEPS)?;
    Ok((losses, resumed_losses, model_only_losses))
}

fn check(compiled: bool) -> Result<()> {
    let dir = TempDir::new(if compiled { "compiled" } else { "eager" });
    let (losses, resumed, model_only) = runs(compiled, &dir.0)?;
    let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(
        bits(&losses[SAVE_AT..]),
        bits(&resumed),
        "resumed {resumed:?} vs uninterrupted {losses:?}"
    );
    // The first step after loading computes the same loss (the weights are the same), the
    // next ones differ: Adam's restored state matters.
    assert_eq!(model_only[0].to_bits(), resumed[0].to_bits());
    assert_ne!(bits(&model_only[1..]), bits(&resumed[1..]));
    Ok(())
}

#[test]
fn eager_resume_repeats_the_uninterrupted_losses() -> Result<()> {
    check(false)
}

#[test]
fn compiled_resume_repeats_the_uninterrupted_losses() -> Result<()> {
    check(true)
}

#[test]
fn the_model_names_its_tensors_like_pytorch_modules() -> Result<()> {
    let (_, c) = setup();
    let model = Gpt::new(c, 0)?;
    let names: Vec<String> = model.state_dict().keys().map(str::to_string).collect();
    assert_eq!(names.len(), 2 + 10 * c.layers + 3);
    assert_eq!(
        names[..4],
        [
            "tok_emb.weight",
            "pos_emb.weight",
            "blocks.0.ln1.weight",
            "blocks.0.ln1.bias"
        ]
    );
    for name in [
        "blocks.0.attn.qkv.weight",
        "blocks.1.mlp.proj.bias",
        "ln_f.weight",
        "head.weight",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    // No bias on the attention projections or the head.
    assert!(
        !names
            .iter()
            .any(|n| n.ends_with("qkv.bias") || n == "head.bias")
    );
    Ok(())
}
