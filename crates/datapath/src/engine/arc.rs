//! Feature arcs: the stages a port's frames pass through, in order, built
//! per port from the features enabled on it (VPP's feature arcs, whose
//! nodes declare `runs_before` and `runs_after`). A stage that is off on a
//! port is not on its arc, so it costs that port nothing.
//!
//! The stages are declared in one table per direction (the worker's
//! `stages` module); each declaration names the stages it runs after and
//! before. [`Order::new`] sorts the whole table once and refuses one that
//! names an unknown stage or whose constraints go round in a circle; every
//! arc is the table's order restricted to its port's stages, so a
//! constraint holds even between two stages that have a disabled one
//! between them.
//!
//! Pure: the run entries are a type parameter (the worker's functions),
//! and which stages a port wants is a predicate over [`Features`].

use smallvec::SmallVec;

/// What a stage does, for views and the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// On every frame's path: read, parse, VLAN, learn, look up, forward,
    /// queue, write.
    Engine,
    /// Where enabled: guards, security groups, policer, shares.
    Policy,
    /// Where the port needs it: LRO, checksum.
    Offload,
    /// Where enabled: capture, mirrors, IPFIX, snooping.
    Observation,
}

/// What is on at a port, as the arc builder asks it (read from the
/// port's settings and the switch's tables at each refresh).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// It faces the wire (an uplink, team or tunnel endpoint).
    pub uplink: bool,
    /// A capture takes frames as they come in from it.
    pub capture_in: bool,
    /// Its receive checksums are checked in software (an uplink whose
    /// device's word is not taken).
    pub csum_software: bool,
    /// Its frames are coalesced in software before switching (an
    /// uplink's `lro = "software"`).
    pub lro_software: bool,
    /// It is a mirror's output: what it sends is dropped.
    pub mirror_output: bool,
    /// Its link is administratively down (`connected = false`).
    pub disconnected: bool,
    /// A policer on what it sends (`tx_rate`).
    pub policer: bool,
    /// Frames from another MAC than its own are refused
    /// (`allow_forged_transmits = false`).
    pub forged_check: bool,
    /// A guard is on (source, ARP, ND, DHCP, RA).
    pub guards: bool,
    /// Some port snoops DHCP (ACKs crossing the switch are read).
    pub lease_snooping: bool,
    /// It has security groups.
    pub acl: bool,
    /// A mirror selects what it sends (or its VLANs, or everything).
    pub mirror_in: bool,
    /// A mirror selects what is sent to it.
    pub mirror_out: bool,
    /// The stages' switch-wide services installed (flow export's
    /// exporter, `[ipfix]`).
    pub services: crate::engine::services::Installed,
    /// ARP and ND requests are answered for the fabric (a VM's port with
    /// a tunnel endpoint on the switch).
    pub suppression: bool,
    /// IGMP and MLD snooping.
    pub snooping: bool,
    /// An uplink whose capacity is shared among the VMs (`capacity`).
    pub shares: bool,
}

/// One stage's declaration.
pub struct Decl<R: 'static> {
    /// Its name, as the trace and the views show it.
    pub name: &'static str,
    /// What it does.
    pub kind: Kind,
    /// Stages it runs after, by name.
    pub after: &'static [&'static str],
    /// Stages it runs before, by name.
    pub before: &'static [&'static str],
    /// True if a port with these features runs it (an engine stage: always).
    pub wants: fn(&Features) -> bool,
    /// Its entry.
    pub run: R,
}

/// An engine stage's `wants`: on every port's arc.
pub fn always(_: &Features) -> bool {
    true
}

/// A stage left out of a build's arcs: on no port's.
pub fn never(_: &Features) -> bool {
    false
}

/// Why a table of stages cannot be ordered.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArcError {
    /// A constraint names a stage the table does not have.
    #[error("stage {stage:?} names {unknown:?}, which is no stage of its arc")]
    UnknownStage {
        /// The stage declaring the constraint.
        stage: &'static str,
        /// The name it gave.
        unknown: &'static str,
    },
    /// Two stages have the same name.
    #[error("two stages are named {0:?}")]
    Duplicate(&'static str),
    /// The constraints go round in a circle through these stages.
    #[error("the stages {0:?} must each run before another: no order satisfies them")]
    Cycle(Vec<&'static str>),
}

/// The order of a whole table, checked (a topological sort of its
/// constraints, ties kept in declaration order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order(Vec<usize>);

impl Order {
    /// Sorts `decls` by their constraints.
    pub fn new<R>(decls: &[Decl<R>]) -> Result<Order, ArcError> {
        let n = decls.len();
        let index = |stage: &'static str, name: &'static str| {
            decls
                .iter()
                .position(|d| d.name == name)
                .ok_or(ArcError::UnknownStage {
                    stage,
                    unknown: name,
                })
        };
        for (i, d) in decls.iter().enumerate() {
            if decls[..i].iter().any(|e| e.name == d.name) {
                return Err(ArcError::Duplicate(d.name));
            }
        }
        // edges[a] holds b when a runs before b.
        let mut edges = vec![Vec::new(); n];
        for (i, d) in decls.iter().enumerate() {
            for name in d.after {
                edges[index(d.name, name)?].push(i);
            }
            for name in d.before {
                edges[i].push(index(d.name, name)?);
            }
        }
        let mut pending = vec![0usize; n];
        for e in edges.iter().flatten() {
            pending[*e] += 1;
        }
        let mut order = Vec::with_capacity(n);
        let mut done = vec![false; n];
        while order.len() < n {
            // The first declared stage with nothing left to wait for.
            let Some(next) = (0..n).find(|&i| !done[i] && pending[i] == 0) else {
                let rest = (0..n).filter(|&i| !done[i]).map(|i| decls[i].name);
                return Err(ArcError::Cycle(rest.collect()));
            };
            done[next] = true;
            order.push(next);
            for &e in &edges[next] {
                pending[e] -= 1;
            }
        }
        Ok(Order(order))
    }

    /// The arc of a port with `features`: the stages it wants, in order.
    pub fn build<R: Copy>(&self, decls: &[Decl<R>], features: &Features) -> FeatureArc<R> {
        self.build_with(decls, |d| (d.wants)(features))
    }

    /// The arc of the stages `on` picks, in order.
    pub fn build_with<R: Copy>(
        &self,
        decls: &[Decl<R>],
        on: impl Fn(&Decl<R>) -> bool,
    ) -> FeatureArc<R> {
        let stages = self
            .0
            .iter()
            .map(|&i| &decls[i])
            .filter(|d| on(d))
            .map(|d| (d.name, d.run))
            .collect();
        FeatureArc { stages }
    }
}

/// A port's stages in one direction, in order: names (for the trace and
/// the views) and entries.
#[derive(Clone, Debug)]
pub struct FeatureArc<R> {
    stages: SmallVec<[(&'static str, R); 20]>,
}

impl<R> Default for FeatureArc<R> {
    fn default() -> Self {
        FeatureArc {
            stages: SmallVec::new(),
        }
    }
}

impl<R: Copy> FeatureArc<R> {
    /// Stage `k`: its name and entry.
    #[inline]
    pub fn stage(&self, k: usize) -> (&'static str, R) {
        self.stages[k]
    }

    /// The stages' names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.stages.iter().map(|s| s.0).collect()
    }

    /// True if the arc has the stage `name`.
    pub fn has(&self, name: &str) -> bool {
        self.stages.iter().any(|s| s.0 == name)
    }

    /// Stages on the arc.
    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// True for an arc of no stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn always(_: &Features) -> bool {
        true
    }

    fn decl(
        name: &'static str,
        after: &'static [&'static str],
        before: &'static [&'static str],
    ) -> Decl<u8> {
        Decl {
            name,
            kind: Kind::Engine,
            after,
            before,
            wants: always,
            run: 0,
        }
    }

    #[test]
    fn constraints_order_the_table_and_ties_keep_declaration_order() {
        let t = [
            decl("c", &["b"], &[]),
            decl("a", &[], &[]),
            decl("b", &["a"], &[]),
            decl("z", &[], &["a"]),
        ];
        let o = Order::new(&t).unwrap();
        let names = o.build_with(&t, |_| true).names();
        assert_eq!(names, ["z", "a", "b", "c"]);
    }

    #[test]
    fn a_circle_is_refused_naming_its_stages() {
        let t = [
            decl("a", &["b"], &[]),
            decl("b", &["a"], &[]),
            decl("x", &[], &[]),
        ];
        match Order::new(&t) {
            Err(ArcError::Cycle(s)) => assert_eq!(s, ["a", "b"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_unknown_or_doubled_name_is_refused() {
        let t = [decl("a", &["nope"], &[])];
        assert_eq!(
            Order::new(&t),
            Err(ArcError::UnknownStage {
                stage: "a",
                unknown: "nope"
            })
        );
        let t = [decl("a", &[], &[]), decl("a", &[], &[])];
        assert_eq!(Order::new(&t), Err(ArcError::Duplicate("a")));
    }

    #[test]
    fn a_constraint_holds_across_a_stage_left_out() {
        let t = [
            decl("c", &["b"], &[]),
            decl("b", &["a"], &[]),
            decl("a", &[], &[]),
        ];
        let o = Order::new(&t).unwrap();
        assert_eq!(o.build_with(&t, |d| d.name != "b").names(), ["a", "c"]);
    }
}
