//! Compiled training of a model with batch norms in training mode: the forward and backward
//! compile (no interpreter fallback), and every step equals the eager step — the loss, the
//! gradients and the buffers (`running_mean`, `running_var`, `num_batches_tracked`), which the
//! compiled forward updates in the tensors passed to it.

use std::sync::{Arc, Mutex};

use tensorplay_compiler::compile;
use tensorplay_compiler::optim::Sgd;
use tensorplay_nn::{
    BatchNorm1d, BatchNorm2d, Conv2d, ConvOptions, Forward, Linear, Module,
    functional_call_with_buffers,
};
use tensorplay_runtime::nn::{Reduction, mse_loss};
use tensorplay_runtime::{DType, Result, Tensor, manual_seed};

#[derive(Module)]
#[module(crate = tensorplay_nn)]
struct Net {
    conv: Conv2d,
    bn2: BatchNorm2d,
    fc: Linear,
    bn1: BatchNorm1d,
}

impl Net {
    fn new() -> Result<Net> {
        manual_seed(3);
        Ok(Net {
            conv: Conv2d::new(2, 4, [3, 3], ConvOptions::default())?,
            bn2: BatchNorm2d::new(4)?,
            fc: Linear::new(4, 3, true)?,
            bn1: BatchNorm1d::new(3)?,
        })
    }

    /// conv → BatchNorm2d → relu → spatial mean → linear → BatchNorm1d → mse.
    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let h = self.bn2.forward(&self.conv.forward(x)?)?.relu()?;
        let h = self
            .bn1
            .forward(&self.fc.forward(&h.mean(&[2, 3], false)?)?)?;
        mse_loss(&h, y, Reduction::Mean)
    }
}

fn batch(step: u64) -> Result<(Tensor, Tensor)> {
    let x = Tensor::randn_seeded(&[8, 2, 6, 6], DType::F32, 100 + step)?.add_scalar(0.5)?;
    let y = Tensor::randn_seeded(&[8, 3], DType::F32, 200 + step)?;
    Ok((x, y))
}

fn assert_close(what: &str, a: &Tensor, b: &Tensor, tol: f64) -> Result<()> {
    assert_eq!(a.shape(), b.shape(), "{what}");
    assert_eq!(a.dtype(), b.dtype(), "{what}");
    let (a, b) = (a.to_vec_f64()?, b.to_vec_f64()?);
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}: {a:?} vs {b:?}"
        );
    }
    Ok(())
}

/// `net`'s parameters set to `like`'s (tests run in parallel and share the seeded generator).
fn same_parameters(net: &Net, like: &Net) -> Result<()> {
    let _g = tensorplay_runtime::autograd::no_grad();
    for (p, q) in net.parameters().iter().zip(like.parameters()) {
        p.copy_(&q)?;
    }
    Ok(())
}

fn buffers(m: &Net) -> Vec<Tensor> {
    m.named_buffers()
        .into_iter()
        .map(|(_, b)| b.clone())
        .collect()
}

type Step = Box<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync>;

/// The compiled loss of `net`: inputs `x, y`, the parameters, then the buffers.
fn compiled_loss(net: &Arc<Mutex<Net>>, num_params: usize) -> tensorplay_compiler::CompiledFn {
    let shared = net.clone();
    let step: Step = Box::new(move |xs: &[Tensor]| {
        let mut m = shared.lock().unwrap();
        let (params, bufs) = xs[2..].split_at(num_params);
        let loss = functional_call_with_buffers(&mut *m, params, bufs, |m| m.loss(&xs[0], &xs[1]))?;
        Ok(vec![loss])
    });
    compile(step)
}

#[test]
fn batch_norm_in_training_mode_trains_compiled_like_eager() -> Result<()> {
    let eager = Net::new()?;
    let net = Arc::new(Mutex::new(Net::new()?));
    same_parameters(&net.lock().unwrap(), &eager)?;
    let (params, bufs) = {
        let m = net.lock().unwrap();
        (m.parameters(), buffers(&m))
    };
    assert_eq!(bufs.len(), 6);
    let f = compiled_loss(&net, params.len());
    let mut opt_e = Sgd::new(eager.parameters(), 0.1, 0.9)?;
    let mut opt_c = Sgd::new(params.clone(), 0.1, 0.9)?;
    for step in 0..5 {
        let (x, y) = batch(step)?;
        let le = eager.loss(&x, &y)?;
        let inputs = [vec![x, y], params.clone(), bufs.clone()].concat();
        let lc = f.call(&inputs)?.swap_remove(0);
        assert_close(&format!("step {step}: loss"), &lc, &le, 1e-5)?;
        le.backward()?;
        lc.backward()?;
        for (i, (pe, pc)) in eager.parameters().iter().zip(&params).enumerate() {
            let (ge, gc) = (pe.grad().unwrap(), pc.grad().unwrap());
            assert_close(&format!("step {step}: gradient {i}"), &gc, &ge, 1e-4)?;
        }
        for ((name, be), bc) in eager.named_buffers().into_iter().zip(&bufs) {
            assert_close(&format!("step {step}: {name}"), bc, &be, 1e-5)?;
        }
        opt_e.step()?;
        opt_c.step()?;
        opt_e.zero_grad();
        opt_c.zero_grad();
    }
    let counted = bufs[2].item::<i64>()?;
    assert_eq!(
        counted, 5,
        "num_batches_tracked counts every compiled step once"
    );
    assert!(
        f.training_fallbacks().is_empty(),
        "{:?}",
        f.training_fallbacks()
    );
    assert_eq!(f.num_compiled(), 1, "one training graph serves every step");
    Ok(())
}

#[test]
fn batch_norm_in_eval_mode_still_compiles() -> Result<()> {
    let mut eager = Net::new()?;
    let net = Arc::new(Mutex::new(Net::new()?));
    eager.eval();
    net.lock().unwrap().eval();
    same_parameters(&net.lock().unwrap(), &eager)?;
    let (params, bufs) = {
        let m = net.lock().unwrap();
        (m.parameters(), buffers(&m))
    };
    let f = compiled_loss(&net, params.len());
    let (x, y) = batch(0)?;
    let le = eager.loss(&x, &y)?;
    let lc = f
        .call(&[vec![x, y], params.clone(), bufs.clone()].concat())?
        .swap_remove(0);
    assert_close("eval loss", &lc, &le, 1e-5)?;
    lc.backward()?;
    assert!(params.iter().all(|p| p.grad().is_some()));
    assert_eq!(bufs[2].item::<i64>()?, 0, "evaluation counts no batch");
    assert!(f.training_fallbacks().is_empty());
    Ok(())
}
