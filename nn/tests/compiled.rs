//! A module called inside `compile` through `functional_call` takes its parameters as graph
//! inputs: the compiled training step follows the eager one, and after an optimizer step the
//! compiled function computes with the updated parameters (they are not baked-in constants).

use std::sync::{Arc, Mutex};

use tensorplay_compiler::compile;
use tensorplay_compiler::optim::Adam;
use tensorplay_nn::{Forward, GELU, LayerNorm, Linear, Module, functional_call};
use tensorplay_runtime::nn::{Reduction, mse_loss};
use tensorplay_runtime::{DType, Result, Tensor, manual_seed};

#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Mlp {
    fc1: Linear,
    act: GELU,
    norm: LayerNorm,
    fc2: Linear,
}

impl Mlp {
    fn new(seed: u64) -> Result<Mlp> {
        manual_seed(seed);
        Ok(Mlp {
            fc1: Linear::new(6, 32, true)?,
            act: GELU::tanh(),
            norm: LayerNorm::new(&[32])?,
            fc2: Linear::new(32, 2, true)?,
        })
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let h = self
            .norm
            .forward(&self.act.forward(&self.fc1.forward(x)?)?)?;
        mse_loss(&self.fc2.forward(&h)?, y, Reduction::Mean)
    }
}

fn data() -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn_seeded(&[64, 6], DType::F32, 7)?;
    let y = x.narrow(1, 0, 2)?.mul(&x.narrow(1, 2, 2)?)?.tanh()?;
    Ok((x, y))
}

#[test]
fn a_compiled_module_loss_trains_like_the_eager_one() -> Result<()> {
    let (x, y) = data()?;
    // Two identical models: one trained eagerly, one through the compiled function.
    let eager = Mlp::new(1)?;
    let compiled = Arc::new(Mutex::new(Mlp::new(1)?));
    let params = compiled.lock().unwrap().parameters();
    let shared = compiled.clone();
    let f = compile(move |xs: &[Tensor]| {
        let mut m = shared.lock().unwrap();
        let loss = functional_call(&mut *m, &xs[2..], |m| m.loss(&xs[0], &xs[1]))?;
        Ok(vec![loss])
    });
    let inputs = |ps: &[Tensor]| [vec![x.clone(), y.clone()], ps.to_vec()].concat();

    let mut opt_e = Adam::new(eager.parameters(), 1e-2, (0.9, 0.999), 1e-8)?;
    let mut opt_c = Adam::new(params.clone(), 1e-2, (0.9, 0.999), 1e-8)?;
    let mut previous = None;
    let (mut first, mut last) = (0.0, 0.0);
    for step in 0..30 {
        let le = eager.loss(&x, &y)?;
        let lc = f.call(&inputs(&params))?.swap_remove(0);
        let (ve, vc) = (le.item::<f32>()?, lc.item::<f32>()?);
        assert!(
            (ve - vc).abs() <= 1e-4 * (1.0 + ve.abs()),
            "step {step}: eager {ve}, compiled {vc}"
        );
        // The optimizer's last step changed what the compiled function computes.
        if let Some(p) = previous {
            assert_ne!(
                vc, p,
                "step {step}: the compiled loss did not see the update"
            );
        }
        previous = Some(vc);
        if step == 0 {
            first = vc;
        }
        last = vc;
        le.backward()?;
        lc.backward()?;
        // Gradients reach the module's own parameters through the compiled backward.
        assert!(params.iter().all(|p| p.grad().is_some()), "step {step}");
        opt_e.step()?;
        opt_c.step()?;
        opt_e.zero_grad();
        opt_c.zero_grad();
    }
    assert!(last < 0.5 * first, "{first} -> {last}");
    assert_eq!(f.num_compiled(), 1, "one training graph serves every step");
    assert!(f.latest_training().is_some() && f.training_fallbacks().is_empty());
    // The module's own parameters (restored after every capture) are the trained ones.
    let m = compiled.lock().unwrap();
    for (mine, p) in m.parameters().iter().zip(&params) {
        assert!(mine.same(p));
    }
    Ok(())
}
