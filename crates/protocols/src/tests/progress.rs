//! Every two-party protocol reports its phases with item counts, and through [`Phases`] those
//! arrive as phases of the caller's stage (what the CLI shows inside a bucket).

use super::*;
use std::sync::Mutex;

/// One call a protocol made on its progress.
#[derive(Clone, Debug, PartialEq)]
enum Call {
    Stage(&'static str, u64),
    Advance(u64),
    Phase(&'static str, u64),
    PhaseAdvance(u64),
}

#[derive(Default)]
struct Recorder(Mutex<Vec<Call>>);

impl Recorder {
    fn push(&self, c: Call) {
        self.0.lock().unwrap().push(c);
    }
    fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }
}

impl Progress for Recorder {
    fn stage(&self, name: &'static str, total: u64) {
        self.push(Call::Stage(name, total));
    }
    fn advance(&self, n: u64) {
        self.push(Call::Advance(n));
    }
    fn phase(&self, name: &'static str, total: u64) {
        self.push(Call::Phase(name, total));
    }
    fn phase_advance(&self, n: u64) {
        self.push(Call::PhaseAdvance(n));
    }
}

/// Runs `p` on `n` items per side (half shared); each side reports to its recorder through
/// [`Phases`] when `phases`, else directly.
fn recorded(p: Proto, n: usize, phases: bool) -> (Vec<Call>, Vec<Call>) {
    let (xs, ys) = sets(
        &Case {
            n_r: n,
            n_s: n,
            overlap: n / 2,
        },
        7,
    );
    let (rec_r, rec_s) = (Recorder::default(), Recorder::default());
    let opts = PsiOptions {
        batch_size: 256,
        ..PsiOptions::default()
    };
    let (mut la, mut lb) = mem_pair();
    std::thread::scope(|scope| {
        let (opts, rec_s) = (&opts, &rec_s);
        let sender = scope.spawn(move || {
            let hs = handshake(&mut lb, Hello::new(p, Role::Sender, false, n as u64)).unwrap();
            let wrapped = Phases(rec_s);
            let progress: &dyn Progress = if phases { &wrapped } else { rec_s };
            run_psi(&mut lb, &hs, opts, &ys, progress).unwrap();
        });
        let hs = handshake(&mut la, Hello::new(p, Role::Receiver, false, n as u64)).unwrap();
        let wrapped = Phases(&rec_r);
        let progress: &dyn Progress = if phases { &wrapped } else { &rec_r };
        let out = run_psi(&mut la, &hs, opts, &xs, progress).unwrap();
        assert_eq!(out.intersection.map(|i| i.len()), Some(n / 2));
        sender.join().unwrap();
    });
    (rec_r.calls(), rec_s.calls())
}

/// Each stage's name and total with the items its advances added up to.
fn stages(calls: &[Call]) -> Vec<(&'static str, u64, u64)> {
    let mut out: Vec<(&'static str, u64, u64)> = Vec::new();
    for c in calls {
        match *c {
            Call::Stage(name, total) => out.push((name, total, 0)),
            Call::Advance(n) => out.last_mut().expect("an advance before any stage").2 += n,
            Call::Phase(..) | Call::PhaseAdvance(_) => panic!("a phase reported directly: {c:?}"),
        }
    }
    out
}

/// Every stage with a total ends with all its items done; stages without one report none.
fn check_counts(side: &str, stages: &[(&'static str, u64, u64)]) {
    for &(name, total, done) in stages {
        assert_eq!(done, total, "{side}: {name}");
    }
}

#[test]
fn rr22_reports_items_through_each_phase() {
    let n = 3000;
    let (r, s) = recorded(rr22(rr22::Rr22Mode::Fast), n, false);
    let (r, s) = (stages(&r), stages(&s));
    check_counts("receiver", &r);
    check_counts("sender", &s);
    let names = |v: &[(&'static str, u64, u64)]| v.iter().map(|s| s.0).collect::<Vec<_>>();
    assert_eq!(
        names(&r),
        [
            "RR22: VOLE and OKVS encoding",
            "RR22: sending the masked OKVS",
            "RR22: matching"
        ]
    );
    assert_eq!(
        names(&s),
        [
            "RR22: VOLE",
            "RR22: receiving the masked OKVS",
            "RR22: sending outputs"
        ]
    );
    assert_eq!(r[2].1, n as u64);
    assert_eq!(s[2].1, n as u64);
    // Both sides count the same OKVS, at least one entry per item.
    assert_eq!(r[1].1, s[1].1);
    assert!(r[1].1 >= n as u64);
}

#[test]
fn kkrt_reports_items_through_each_phase() {
    let n = 2000;
    let (r, s) = recorded(kkrt(), n, false);
    let (r, s) = (stages(&r), stages(&s));
    check_counts("receiver", &r);
    check_counts("sender", &s);
    assert_eq!(r.last(), Some(&("KKRT: matching", n as u64, n as u64)));
    assert_eq!(s.last(), Some(&("KKRT: sending tags", n as u64, n as u64)));
}

#[test]
fn ecdh_reports_items_through_each_phase() {
    let n = 1500;
    let (r, s) = recorded(ecdh(Curve::Curve25519), n, false);
    let (r, s) = (stages(&r), stages(&s));
    check_counts("receiver", &r);
    check_counts("sender", &s);
    let n = n as u64;
    assert_eq!(
        r,
        [
            ("ECDH: masking own items", n, n),
            ("ECDH: masking the peer's items", n, n),
            ("ECDH: matching", n, n)
        ]
    );
    assert_eq!(
        s,
        [
            ("ECDH: masking own items", n, n),
            ("ECDH: masking the peer's items", n, n)
        ]
    );
    // Batch by batch (256 items here), not all at once at the end: the line moves during a
    // phase. Own items and tags go one message per batch.
    let (calls, _) = recorded(ecdh(Curve::Curve25519), 1500, false);
    let per_stage = advances_per_stage(&calls);
    assert!(per_stage[0] >= 1500 / 256, "{per_stage:?}");
    assert!(per_stage[2] >= 1500 / 256, "{per_stage:?}");
}

/// How many advances each stage got.
fn advances_per_stage(calls: &[Call]) -> Vec<usize> {
    let mut out = Vec::new();
    for c in calls {
        match c {
            Call::Stage(..) => out.push(0),
            Call::Advance(_) => *out.last_mut().expect("an advance before any stage") += 1,
            Call::Phase(..) | Call::PhaseAdvance(_) => {}
        }
    }
    out
}

#[test]
fn through_phases_a_run_reports_phases_not_stages() {
    let (direct, _) = recorded(rr22(rr22::Rr22Mode::Fast), 1000, false);
    let (nested, _) = recorded(rr22(rr22::Rr22Mode::Fast), 1000, true);
    // The same calls, each a phase call instead of a stage call.
    let as_phases: Vec<Call> = direct
        .into_iter()
        .map(|c| match c {
            Call::Stage(name, total) => Call::Phase(name, total),
            Call::Advance(n) => Call::PhaseAdvance(n),
            other => other,
        })
        .collect();
    let totals = |v: &[Call]| -> Vec<Call> {
        v.iter()
            .filter(|c| matches!(c, Call::Phase(..)))
            .cloned()
            .collect()
    };
    assert_eq!(totals(&nested), totals(&as_phases));
    let items = |v: &[Call]| -> u64 {
        v.iter()
            .map(|c| match c {
                Call::PhaseAdvance(n) => *n,
                Call::Stage(..) | Call::Advance(_) => panic!("a stage call through Phases: {c:?}"),
                Call::Phase(..) => 0,
            })
            .sum()
    };
    assert_eq!(items(&nested), items(&as_phases));
}
