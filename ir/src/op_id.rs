//! Stable handles for operator names, so passes and code generators compare ops by a small
//! integer instead of by `"tp::…"` strings. Printed by name, so text formats do not change.

use std::collections::HashMap;
use std::fmt;
use std::sync::{OnceLock, RwLock};

/// The handle of a qualified operator name (`tp::add`, `mylib::f.out`). The same name always
/// gets the same handle within a process; handles are dense, so tables can index by them.
///
/// ```
/// use tensorplay_ir::OpId;
/// let a = OpId::of("tp::add");
/// assert_eq!(a, OpId::of("tp::add"));
/// assert_ne!(a, OpId::of("tp::sub"));
/// assert_eq!(a.name(), "tp::add");
/// assert_eq!(a.to_string(), "tp::add");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(u32);

#[derive(Default)]
struct Interner {
    ids: HashMap<&'static str, u32>,
    names: Vec<&'static str>,
}

fn interner() -> &'static RwLock<Interner> {
    static I: OnceLock<RwLock<Interner>> = OnceLock::new();
    I.get_or_init(Default::default)
}

impl OpId {
    /// The handle of `name`, assigned on first use. Names are interned for the life of the
    /// process (there are as many as distinct operator names, a small set).
    pub fn of(name: &str) -> OpId {
        let lock = interner();
        if let Some(&id) = lock.read().unwrap_or_else(|e| e.into_inner()).ids.get(name) {
            return OpId(id);
        }
        let mut w = lock.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = w.ids.get(name) {
            return OpId(id);
        }
        let id = w.names.len() as u32;
        let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
        w.names.push(leaked);
        w.ids.insert(leaked, id);
        OpId(id)
    }

    /// The qualified name.
    pub fn name(self) -> &'static str {
        interner().read().unwrap_or_else(|e| e.into_inner()).names[self.0 as usize]
    }

    /// The dense index of the handle (for tables indexed by op).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Debug for OpId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OpId({})", self.name())
    }
}
