//! The structural invariants every fusion plan satisfies, whatever the graph: shared by the pass
//! tests and the file tests (`#[path = "common/plans.rs"] mod plans;`).

use std::collections::BTreeMap;

use tensorplay_compiler::passes::fusion::{FusionPlan, Step};
use tensorplay_compiler::passes::region::RegionKind;
use tensorplay_ir::graph::Graph;
use tensorplay_ir::{NodeId, ValueRef};

/// Checks what every plan must satisfy, whatever the graph.
pub fn check_plan(g: &Graph, plan: &FusionPlan) {
    // Each op node in exactly one step; node steps have reasons; regions are numbered densely.
    let mut step_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    let mut region_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, r) in plan.regions.iter().enumerate() {
        assert_eq!(r.id, i);
        assert!(!r.nodes.is_empty());
        assert!(!r.outputs.is_empty(), "region {i} has no outputs");
    }
    for (k, step) in plan.steps.iter().enumerate() {
        match *step {
            Step::Region(r) => {
                for &n in &plan.regions[r].nodes {
                    assert!(step_of.insert(n, k).is_none());
                    region_of.insert(n, r);
                }
            }
            Step::Node(n) => {
                assert!(step_of.insert(n, k).is_none());
                assert!(
                    plan.node_steps.contains_key(&n),
                    "node step without a reason"
                );
            }
        }
    }
    assert_eq!(
        plan.node_steps.len(),
        plan.steps
            .iter()
            .filter(|s| matches!(s, Step::Node(_)))
            .count()
    );
    for id in g.node_ids() {
        if g.node(id).unwrap().as_op().is_some() {
            assert!(
                step_of.contains_key(&id),
                "{} is in no step",
                g.describe(id)
            );
        }
    }
    // Every edge between op nodes runs forward, or stays inside one region (convexity and order).
    for (s, t, _) in g.edges() {
        if let (Some(&a), Some(&b)) = (step_of.get(&s), step_of.get(&t)) {
            assert!(
                a < b || (a == b && region_of.contains_key(&s)),
                "edge {} -> {} runs backwards (steps {a} -> {b})",
                g.describe(s),
                g.describe(t)
            );
        }
    }
    // Region inputs come from outside, outputs are exactly the values read outside; shapes fit.
    let outs = g.outputs().unwrap();
    for r in &plan.regions {
        let iter = r.iteration_shape(g).unwrap();
        for &v in &r.inputs {
            assert!(!r.contains(v.node));
        }
        for &n in &r.nodes {
            let v = ValueRef::from(n);
            let leaves = outs.contains(&v)
                || g.users(n).is_empty()
                || g.users(n).iter().any(|&u| !r.contains(u));
            assert_eq!(
                r.outputs.contains(&v),
                leaves,
                "output set of region {}",
                r.id
            );
            let s = &g.meta(v).unwrap().shape;
            assert!(s.len() <= iter.len());
        }
        match &r.kind {
            RegionKind::Pointwise => {
                for &v in &r.outputs {
                    assert_eq!(
                        g.meta(v).unwrap().shape,
                        iter,
                        "region {} output shape",
                        r.id
                    );
                }
            }
            RegionKind::Reduction { reduction, .. } => {
                assert_eq!(r.outputs, vec![ValueRef::from(*reduction)]);
            }
            RegionKind::Softmax { node, .. } => {
                assert_eq!(r.outputs, vec![ValueRef::from(*node)]);
            }
        }
    }
}
