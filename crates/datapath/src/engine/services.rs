//! What a stage keeps beyond a port's settings, so that a feature lives
//! in its own folder: a switch-wide service (an exporter, a table), one
//! per type, installed and replaced at run time; and a worker's own
//! state for the stage, made on first use. The engine knows neither's
//! type: a stage asks for its own by type.

use std::any::{Any, TypeId};
use std::sync::{Arc, RwLock};

/// A switch-wide service a stage runs with.
pub trait Service: Any + Send + Sync {
    /// The switch stops (or the service is replaced): what it holds goes
    /// out (an exporter's last records).
    fn shutdown(&self) {}
}

/// The most kinds of service a switch holds: [`Installed`] is a plain
/// value the arc builder copies per port.
const KINDS: usize = 8;

type Entry = (TypeId, Arc<dyn Any + Send + Sync>, Arc<dyn Service>);

/// The switch's services, by type.
#[derive(Default)]
pub struct Services {
    map: RwLock<Vec<Entry>>,
}

impl Services {
    /// The service of type `T`, if installed.
    pub fn get<T: Service>(&self) -> Option<Arc<T>> {
        let map = self.map.read().expect("services lock");
        let (_, any, _) = map.iter().find(|(t, _, _)| *t == TypeId::of::<T>())?;
        Arc::clone(any).downcast::<T>().ok()
    }

    /// Installs `new` as the service of type `T` (None: removes it);
    /// returns the one it replaced, for the caller to shut down once the
    /// workers have moved on.
    pub(crate) fn replace<T: Service>(&self, new: Option<Arc<T>>) -> Option<Arc<T>> {
        let mut map = self.map.write().expect("services lock");
        let at = map.iter().position(|(t, _, _)| *t == TypeId::of::<T>());
        let old = at.map(|i| map.remove(i));
        if let Some(s) = new {
            assert!(
                map.len() < KINDS,
                "more than {KINDS} kinds of stage service"
            );
            map.push((TypeId::of::<T>(), s.clone(), s));
        }
        old.and_then(|(_, any, _)| any.downcast::<T>().ok())
    }

    /// Every service taken out (the switch stops).
    pub(crate) fn take_all(&self) -> Vec<Arc<dyn Service>> {
        let mut map = self.map.write().expect("services lock");
        map.drain(..).map(|(_, _, s)| s).collect()
    }

    /// Which kinds are installed, for the arcs.
    pub(crate) fn installed(&self) -> Installed {
        let map = self.map.read().expect("services lock");
        let mut i = Installed::default();
        for (slot, (t, _, _)) in i.0.iter_mut().zip(map.iter()) {
            *slot = Some(*t);
        }
        i
    }
}

/// The kinds of service installed, as a port's features carry them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Installed([Option<TypeId>; KINDS]);

impl Installed {
    /// True if a service of type `T` is installed.
    pub fn has<T: Service>(&self) -> bool {
        self.0.contains(&Some(TypeId::of::<T>()))
    }

    /// Marks `T` installed (the tests' features).
    pub fn insert<T: Service>(&mut self) {
        if !self.has::<T>() {
            if let Some(free) = self.0.iter_mut().find(|s| s.is_none()) {
                *free = Some(TypeId::of::<T>());
            }
        }
    }
}

/// A worker's own state for its stages, one value per type, made on
/// first use (a few entries: found by a walk, once a burst).
#[derive(Default)]
pub(crate) struct Locals(Vec<(TypeId, Box<dyn Any + Send>)>);

impl Locals {
    /// Every stage's state dropped (made again on first use).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    /// The worker's `T`, made with `Default` on first use.
    pub(crate) fn get<T: Any + Send + Default>(&mut self) -> &mut T {
        let at = match self.0.iter().position(|(t, _)| *t == TypeId::of::<T>()) {
            Some(i) => i,
            None => {
                self.0.push((TypeId::of::<T>(), Box::new(T::default())));
                self.0.len() - 1
            }
        };
        self.0[at]
            .1
            .downcast_mut()
            .expect("a local of its own type")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[derive(Default)]
    struct Exporter(AtomicU32);
    impl Service for Exporter {
        fn shutdown(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    struct Table;
    impl Service for Table {}

    #[test]
    fn a_service_is_found_replaced_and_taken_by_its_type() {
        let s = Services::default();
        assert!(s.get::<Exporter>().is_none() && !s.installed().has::<Exporter>());
        let first = Arc::new(Exporter::default());
        assert!(s.replace(Some(first.clone())).is_none());
        s.replace(Some(Arc::new(Table)));
        assert!(Arc::ptr_eq(&s.get::<Exporter>().unwrap(), &first));
        let i = s.installed();
        assert!(i.has::<Exporter>() && i.has::<Table>());
        let old = s.replace::<Exporter>(None).unwrap();
        assert!(Arc::ptr_eq(&old, &first) && s.get::<Exporter>().is_none());
        s.replace(Some(first.clone()));
        for svc in s.take_all() {
            svc.shutdown();
        }
        assert_eq!(first.0.load(Ordering::Relaxed), 1);
        assert!(!s.installed().has::<Table>());
    }

    #[test]
    fn a_workers_locals_are_made_once_per_type() {
        let mut l = Locals::default();
        *l.get::<u32>() += 5;
        *l.get::<u64>() += 7;
        *l.get::<u32>() += 1;
        assert_eq!((*l.get::<u32>(), *l.get::<u64>()), (6, 7));
    }
}
