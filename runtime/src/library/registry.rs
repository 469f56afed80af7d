//! The global operator registry: every operator by qualified name — builtin ops from the op table
//! and custom ops — with its schema and everything registered for it.
//!
//! Registrations carry an owner (a `Library` or the process), so dropping a `Library` removes
//! exactly what it registered. Every mutating call validates first and changes state last, so a
//! failed registration leaves the registry as it was.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use tensorplay_ir::schema::Schema;
use tensorplay_ir::{DType, Device, Error, OpClass, Result};

use super::autograd::AutogradImpl;
use super::options::Tag;
use super::triton::TritonInfo;
use super::vmap_rule::VmapRule;
use tensorplay_core::dispatch::CustomOperator;
pub use tensorplay_core::dispatch::Slot;
use tensorplay_core::ops::{OpDef, all_ops};
use tensorplay_core::tensor::Tensor;
use tensorplay_core::value::Value;

/// A kernel: boxed arguments (bound to the schema) in, tensors out.
pub type KernelFn = Arc<dyn Fn(&[Value]) -> Result<Vec<Tensor>> + Send + Sync>;

/// Who registered something: a `Library` (removed when it drops) or the process (permanent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    Process,
    Library(u64),
}

static NEXT_LIBRARY_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh owner id for a new `Library`.
pub(crate) fn new_library_owner() -> Owner {
    Owner::Library(NEXT_LIBRARY_ID.fetch_add(1, Ordering::Relaxed))
}

/// A map keyed by [`Slot`]: one array cell per slot (read on every custom-op call, so no hashing).
#[derive(Clone)]
pub(crate) struct SlotMap<V>([Option<V>; 3]);

impl<V> Default for SlotMap<V> {
    fn default() -> Self {
        SlotMap([None, None, None])
    }
}

impl<V> SlotMap<V> {
    pub(crate) fn get(&self, slot: &Slot) -> Option<&V> {
        self.0[slot.index()].as_ref()
    }

    /// The value in `slot`, inserting the default first when there is none.
    pub(crate) fn or_default(&mut self, slot: Slot) -> &mut V
    where
        V: Default,
    {
        self.0[slot.index()].get_or_insert_with(V::default)
    }

    /// The slots that hold a value, in `Slot` order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Slot> + '_ {
        Slot::ALL.iter().filter(|s| self.0[s.index()].is_some())
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.0.iter_mut().flatten()
    }

    /// Keeps the values for which `keep` is true.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Slot, &mut V) -> bool) {
        for (slot, cell) in Slot::ALL.iter().zip(&mut self.0) {
            if cell.as_mut().is_some_and(|v| !keep(slot, v)) {
                *cell = None;
            }
        }
    }
}

/// A set of [`Slot`]s (one flag per slot).
#[derive(Default, Clone)]
pub(crate) struct SlotSet([bool; 3]);

impl SlotSet {
    pub(crate) fn contains(&self, slot: &Slot) -> bool {
        self.0[slot.index()]
    }

    /// Adds `slot`; true when it was not there.
    pub(crate) fn insert(&mut self, slot: Slot) -> bool {
        !std::mem::replace(&mut self.0[slot.index()], true)
    }

    /// Removes `slot`; true when it was there.
    pub(crate) fn remove(&mut self, slot: &Slot) -> bool {
        std::mem::replace(&mut self.0[slot.index()], false)
    }
}

/// One registered thing and its owner.
#[derive(Clone)]
pub(crate) struct Entry<T> {
    pub(crate) value: T,
    pub(crate) owner: Owner,
}

/// A registered kernel. `alive` turns false when its owner (a `Library`) drops, so handles from
/// `get_kernel` stop running it.
#[derive(Clone)]
pub(crate) struct KernelEntry {
    pub(crate) f: KernelFn,
    pub(crate) owner: Owner,
    pub(crate) alive: Arc<AtomicBool>,
}

/// Registrations of one kind, newest last. The newest is active; each owner holds at most one
/// entry (registering again replaces its own), so dropping a `Library` that overrode something
/// makes the previous registration active again.
#[derive(Clone)]
pub(crate) struct Stack<T>(Vec<T>);

impl<T> Default for Stack<T> {
    fn default() -> Self {
        Stack(Vec::new())
    }
}

/// What a stack entry needs: its owner.
pub(crate) trait Owned {
    fn owner(&self) -> Owner;
}

impl<T> Owned for Entry<T> {
    fn owner(&self) -> Owner {
        self.owner
    }
}

impl Owned for KernelEntry {
    fn owner(&self) -> Owner {
        self.owner
    }
}

impl<T: Owned> Stack<T> {
    /// Makes `e` the active entry, replacing an earlier one from the same owner.
    pub(crate) fn push(&mut self, e: T) {
        let owner = e.owner();
        self.0.retain(|x| x.owner() != owner);
        self.0.push(e);
    }

    /// The active entry.
    pub(crate) fn top(&self) -> Option<&T> {
        self.0.last()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Removes `owner`'s entry; returns it.
    fn remove_owner(&mut self, owner: Owner) -> Vec<T> {
        let (gone, keep) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|x| x.owner() == owner);
        self.0 = keep;
        gone
    }
}

/// Everything registered for one custom operator.
#[derive(Default, Clone)]
pub(crate) struct Registrations {
    pub(crate) kernels: SlotMap<Stack<KernelEntry>>,
    /// Concrete slots switched off by `set_kernel_enabled` (they stay off for kernels registered
    /// while disabled, until the guard restores the flag).
    pub(crate) disabled: SlotSet,
    pub(crate) fake: Stack<Entry<KernelFn>>,
    pub(crate) autograd: Stack<Entry<Arc<AutogradImpl>>>,
    /// Per device type (`cpu`/`cuda`): the dtype floating inputs are cast to.
    pub(crate) autocast: SlotMap<Stack<Entry<DType>>>,
    pub(crate) vmap: Stack<Entry<VmapRule>>,
    /// The definition's tags (set before the op is published).
    pub(crate) tags: Vec<Tag>,
}

impl Registrations {
    /// The active kernel in `slot` (regardless of the enabled flag).
    pub(crate) fn kernel(&self, slot: Slot) -> Option<&KernelEntry> {
        self.kernels.get(&slot).and_then(Stack::top)
    }

    /// The active kernel in `slot` if the slot is enabled.
    pub(crate) fn enabled_kernel(&self, slot: Slot) -> Option<&KernelEntry> {
        self.kernel(slot).filter(|_| !self.disabled.contains(&slot))
    }

    /// Removes everything owned by `owner`; what was below becomes active again.
    fn remove_owner(&mut self, owner: Owner) {
        for stack in self.kernels.values_mut() {
            for k in stack.remove_owner(owner) {
                k.alive.store(false, Ordering::Relaxed);
            }
        }
        self.kernels.retain(|_, s| !s.is_empty());
        self.fake.remove_owner(owner);
        self.autograd.remove_owner(owner);
        for stack in self.autocast.values_mut() {
            stack.remove_owner(owner);
        }
        self.autocast.retain(|_, s| !s.is_empty());
        self.vmap.remove_owner(owner);
    }
}

/// How an operator came to exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A builtin op from the op table (read-only).
    Builtin,
    /// Created by `custom_op`/`triton_op` (permanent; redefinable through `custom_op`).
    CustomOp,
    /// Created by `define`/`Library::define` (removed with its owner).
    Defined,
}

/// One operator in the registry.
pub struct Operator {
    qualname: String,
    schema: Schema,
    origin: Origin,
    owner: Owner,
    builtin: Option<&'static OpDef>,
    /// Device types the definition advertised (`None` = every device).
    pub(crate) device_types: Option<Vec<Slot>>,
    pub(crate) triton: Option<TritonInfo>,
    pub(crate) regs: RwLock<Registrations>,
    /// The op that replaced this one (a `custom_op` redefinition): old handles follow it.
    successor: RwLock<Option<Arc<Operator>>>,
}

impl fmt::Debug for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Operator({})", self.schema)
    }
}

impl Operator {
    pub(crate) fn new_custom(
        qualname: String,
        schema: Schema,
        origin: Origin,
        owner: Owner,
        device_types: Option<Vec<Slot>>,
        triton: Option<TritonInfo>,
    ) -> Operator {
        Operator {
            qualname,
            schema,
            origin,
            owner,
            builtin: None,
            device_types,
            triton,
            regs: RwLock::new(Registrations::default()),
            successor: RwLock::new(None),
        }
    }

    /// The tags the definition carries.
    pub fn tags(&self) -> Vec<Tag> {
        self.regs.read().tags.clone()
    }

    pub(crate) fn set_tags(&self, tags: Vec<Tag>) {
        self.regs.write().tags = tags;
    }

    /// `ns::name` or `ns::name.overload`.
    pub fn qualname(&self) -> &str {
        &self.qualname
    }

    /// The parsed schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// How the operator was created.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The op-table entry of a builtin op.
    pub fn builtin(&self) -> Option<&'static OpDef> {
        self.builtin
    }

    /// Device types advertised when the op was defined (`None` = every device).
    pub fn device_types(&self) -> Option<&[Slot]> {
        self.device_types.as_deref()
    }

    /// True for ops created by `triton_op`.
    pub fn is_triton(&self) -> bool {
        self.triton.is_some()
    }

    /// Names of parameters the op declares it mutates.
    pub fn mutated_params(&self) -> Vec<&str> {
        self.schema.mutated_params()
    }

    /// The op's class for the compiler: builtins from the op table; custom ops are opaque, or
    /// mutating when they declare mutated arguments.
    pub fn class(&self) -> OpClass {
        match self.builtin {
            Some(def) => def.class,
            None if self.schema.is_mutating() => OpClass::Mutating,
            None => OpClass::Opaque,
        }
    }

    /// True when a fake kernel is registered.
    pub fn has_fake(&self) -> bool {
        self.builtin.is_some() || !self.regs.read().fake.is_empty()
    }

    /// True when the op can run on fake tensors: it has a fake kernel, it mutates its inputs and
    /// returns nothing (nothing to shape), or it is a triton op (its body runs with launches
    /// skipped).
    pub fn runs_on_fake(&self) -> bool {
        self.has_fake()
            || (self.schema.returns.is_empty() && self.schema.is_mutating())
            || self.is_triton()
    }

    /// True when an autograd formula is registered.
    pub fn has_autograd(&self) -> bool {
        !self.regs.read().autograd.is_empty()
    }

    /// The slots that hold a kernel, with their enabled flags, sorted.
    pub fn kernel_slots(&self) -> Vec<(Slot, bool)> {
        let regs = self.regs.read();
        let mut v: Vec<(Slot, bool)> = regs
            .kernels
            .keys()
            .map(|s| (*s, !regs.disabled.contains(s)))
            .collect();
        v.sort();
        v
    }

    /// The slot whose kernel would run for real tensors on `device` (a disabled concrete kernel
    /// falls back to the default slot), or `None` when nothing would run.
    pub fn selected_slot(&self, device: Device) -> Option<Slot> {
        let regs = self.regs.read();
        let concrete = Slot::for_device(device).filter(|s| regs.enabled_kernel(*s).is_some());
        concrete.or_else(|| regs.kernel(Slot::Default).map(|_| Slot::Default))
    }

    /// The kernel in `slot`, if registered (regardless of its enabled flag).
    pub fn kernel_in(&self, slot: Slot) -> Option<KernelFn> {
        self.regs.read().kernel(slot).map(|k| k.f.clone())
    }

    /// The registered fake kernel.
    pub(crate) fn fake_kernel(&self) -> Option<KernelFn> {
        self.regs.read().fake.top().map(|e| e.value.clone())
    }

    /// The registered autograd formula.
    pub(crate) fn autograd_impl(&self) -> Option<Arc<AutogradImpl>> {
        self.regs.read().autograd.top().map(|e| e.value.clone())
    }

    /// The autocast dtype registered for `slot`.
    pub fn autocast_dtype(&self, slot: Slot) -> Option<DType> {
        self.regs
            .read()
            .autocast
            .get(&slot)
            .and_then(Stack::top)
            .map(|e| e.value)
    }

    /// The registered vmap rule.
    pub(crate) fn vmap_rule(&self) -> Option<VmapRule> {
        self.regs.read().vmap.top().map(|e| e.value.clone())
    }

    /// The registry operator behind a dispatcher handle (`None` for another implementation of
    /// the dispatcher's `CustomOperator` trait).
    pub fn from_custom(op: &Arc<dyn CustomOperator>) -> Option<Arc<Operator>> {
        op.clone().into_any().downcast::<Operator>().ok()
    }

    /// The newest definition under this op's name: itself, or the op that replaced it.
    pub(crate) fn latest(self: &Arc<Self>) -> Arc<Operator> {
        let mut op = self.clone();
        loop {
            let next = op.successor.read().clone();
            match next {
                Some(n) => op = n,
                None => return op,
            }
        }
    }

    pub(crate) fn check_mutable(&self, what: &str) -> Result<()> {
        if self.builtin.is_some() {
            return Err(Error::Registration(format!(
                "cannot register {what} for builtin op `{}`",
                self.qualname
            )));
        }
        Ok(())
    }
}

/// The process-wide registry.
pub struct Registry {
    ops: RwLock<HashMap<String, Arc<Operator>>>,
    /// Namespaces with a live `Library(ns, DEF)`.
    def_namespaces: RwLock<HashMap<String, Owner>>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// The global registry, with every builtin op registered under `tp::`.
pub fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        let mut ops = HashMap::new();
        for def in all_ops() {
            let qualname = format!("tp::{}", def.name);
            let schema = Schema::parse(&format!("tp::{}", def.schema))
                .unwrap_or_else(|e| panic!("builtin schema of {qualname} must parse: {e}"));
            ops.insert(
                qualname.clone(),
                Arc::new(Operator {
                    qualname,
                    schema,
                    origin: Origin::Builtin,
                    owner: Owner::Process,
                    builtin: Some(def),
                    device_types: None,
                    triton: None,
                    regs: RwLock::new(Registrations::default()),
                    successor: RwLock::new(None),
                }),
            );
        }
        Registry {
            ops: RwLock::new(ops),
            def_namespaces: RwLock::new(HashMap::new()),
        }
    })
}

/// Splits a possibly schema-carrying qualname (`ns::op(Tensor x) -> Tensor`) into the name part.
pub(crate) fn name_part(s: &str) -> &str {
    s.split('(').next().unwrap_or(s).trim()
}

impl Registry {
    /// Looks up an operator by qualified name (`ns::op` or `ns::op.overload`).
    pub fn find(&self, qualname: &str) -> Option<Arc<Operator>> {
        self.ops.read().get(name_part(qualname)).cloned()
    }

    /// Looks up an operator or fails with a lookup error naming it.
    pub fn get(&self, qualname: &str) -> Result<Arc<Operator>> {
        self.find(qualname).ok_or_else(|| {
            Error::Lookup(format!(
                "no operator named `{}` is registered",
                name_part(qualname)
            ))
        })
    }

    /// Every registered qualified name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ops.read().keys().cloned().collect();
        v.sort();
        v
    }

    /// Inserts `op`, replacing an existing entry only when `replace` allows it.
    pub(crate) fn insert(
        &self,
        op: Arc<Operator>,
        replace: impl Fn(&Operator) -> Result<()>,
    ) -> Result<Arc<Operator>> {
        let mut ops = self.ops.write();
        if let Some(existing) = ops.get(op.qualname()) {
            replace(existing)?;
            *existing.successor.write() = Some(op.clone());
        }
        ops.insert(op.qualname().to_string(), op.clone());
        Ok(op)
    }

    /// Claims `ns` for a DEF library.
    pub(crate) fn claim_def_namespace(&self, ns: &str, owner: Owner) -> Result<()> {
        let mut nss = self.def_namespaces.write();
        if nss.contains_key(ns) {
            return Err(Error::Registration(format!(
                "a DEF library for namespace `{ns}` already exists; use Library::new(\"{ns}\", \"FRAGMENT\") to extend it"
            )));
        }
        nss.insert(ns.to_string(), owner);
        Ok(())
    }

    /// Removes everything `owner` registered: its defined operators, its registrations on other
    /// operators and its namespace claim.
    pub(crate) fn remove_owner(&self, owner: Owner) {
        let mut ops = self.ops.write();
        let mut removed = Vec::new();
        ops.retain(|_, op| {
            // Ops it defined (`define`, or `custom_op(..).lib(..)`) go with it.
            let keep = op.origin == Origin::Builtin || op.owner != owner;
            if !keep {
                removed.push(op.clone());
            }
            keep
        });
        // Handles to a removed op (`Arc<Operator>`) must not keep running its kernels either.
        for op in ops.values().chain(&removed) {
            op.regs.write().remove_owner(owner);
        }
        self.def_namespaces.write().retain(|_, o| *o != owner);
    }
}
