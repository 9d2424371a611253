//! A trace that crosses a tunnel: a traced frame written to a tunnel
//! endpoint leaves with its trace's mark ([`Transmitter::send_traced`]),
//! and the line says where it went and under which token; at the far end
//! a marked frame is traced from its read as a local one is (a synthetic
//! one as a synthetic frame of this host's), and its lines go back to the
//! endpoint that sent it. The trace's reader joins the two.

use super::*;
use crate::trace::TraceLine;
use hvnet_offload::vxlan::{OuterMark, MARK_SYNTHETIC, MARK_TRACED};
use hvnet_port::vxlan::MAX_REPORT;
use hvnet_port::TraceMark;

impl State {
    /// The frames of the burst just begun that the far endpoint marked:
    /// traced here too (a synthetic one taken out, to run alone as this
    /// host's own synthetic frames do).
    pub(super) fn begin_marked(&mut self, cx: &Ctx, b: &mut Burst) {
        let tracer = &cx.port.tracer;
        for m in std::mem::take(&mut self.marks) {
            let TraceMark {
                index: i,
                token,
                synthetic,
            } = m;
            if i >= b.frames.len() || !b.is_live(i) {
                continue;
            }
            if synthetic {
                // Counted in as read; consumed here, to be switched apart.
                tracer.inject_remote(b[i].frame().to_vec(), token);
                add(&cx.port.ingress[cx.q].tunnel_control, 1);
                b.release(i);
                continue;
            }
            let id = tracer.next_number();
            b.mark(i, id);
            self.reports_due.push((id, token));
        }
    }

    /// The lines of the marked frames just switched, reported back.
    pub(super) fn report_marked(&mut self, cx: &Ctx) {
        for (id, token) in std::mem::take(&mut self.reports_due) {
            self.report(cx, id, token);
        }
    }

    /// Frame `id`'s lines, sent back with `token` to the endpoint that
    /// marked it.
    pub(super) fn report(&mut self, cx: &Ctx, id: u64, token: u16) {
        let lines = cx.port.tracer.take_frame(id);
        let host = cx
            .sw
            .endpoint(cx.port.id)
            .map_or_else(String::new, |v| v.cfg.local.to_string());
        self.rx
            .report_trace(token, &report_payload(&host, &cx.port.name, &lines));
    }

    /// A traced frame to tunnel endpoint `dst`: written with its trace's
    /// mark, and the line says where it went. The frame back if it cannot
    /// be marked (not a tunnel, a GSO frame, no remote resolved), for the
    /// usual way.
    pub(super) fn send_traced(
        &mut self,
        cx: &Ctx,
        dst: usize,
        q: usize,
        pkt: Packet,
    ) -> Option<Packet> {
        // What was staged for the endpoint before it leaves first.
        self.hand_over(cx, dst, q);
        let port = &cx.ports[dst];
        let token = crate::trace::next_token();
        let kind = if cx.synthetic() {
            MARK_SYNTHETIC
        } else {
            MARK_TRACED
        };
        let tx = transmitter(&mut self.dest(cx, dst, q).tx, port, q);
        match tx.send_traced(&pkt, OuterMark { kind, token })? {
            Ok(how) => {
                self.trace_out(cx, "vxlan", || {
                    format!(
                        "to {}: {how}; trace #{token} goes on at the far end",
                        port.name
                    )
                });
                if !cx.synthetic() {
                    let c = &self.lane(cx, dst, q).counters;
                    add(&c.delivered_frames, 1);
                    add(&c.delivered_source_frames, 1);
                    add(&c.delivered_bytes, pkt.len() as u64);
                }
                None
            }
            Err(e) => {
                self.trace_out(cx, "vxlan", || {
                    format!(
                        "to {}: not marked for the far end ({e:?}): sent as any frame",
                        port.name
                    )
                });
                Some(pkt)
            }
        }
    }
}

/// A far end's lines as its report carries them: JSON, as many lines as
/// one frame holds (the rest counted).
fn report_payload(host: &str, endpoint: &str, lines: &[TraceLine]) -> Vec<u8> {
    let mut kept: Vec<serde_json::Value> = Vec::new();
    let head = |kept: &Vec<serde_json::Value>, more: usize| serde_json::json!({"host": host, "endpoint": endpoint, "lines": kept, "more": more});
    for (n, l) in lines.iter().enumerate() {
        kept.push(serde_json::json!([l.stage, l.text]));
        if head(&kept, lines.len() - n - 1).to_string().len() > MAX_REPORT {
            kept.pop();
            return head(&kept, lines.len() - n).to_string().into_bytes();
        }
    }
    head(&kept, 0).to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_holds_what_fits_and_counts_the_rest() {
        let lines: Vec<TraceLine> = (0..200)
            .map(|i| TraceLine {
                frame: 1,
                stage: "fdb",
                text: format!("line {i} {}", "x".repeat(40)),
            })
            .collect();
        let p = report_payload("198.18.9.2", "vx0", &lines);
        assert!(p.len() <= MAX_REPORT);
        let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
        let kept = v["lines"].as_array().unwrap().len();
        assert!(
            kept > 5 && kept + v["more"].as_u64().unwrap() as usize == 200,
            "{v}"
        );
        let v: serde_json::Value =
            serde_json::from_slice(&report_payload("h", "vx0", &lines[..2])).unwrap();
        assert_eq!(
            (v["lines"].as_array().unwrap().len(), v["more"].as_u64()),
            (2, Some(0))
        );
    }
}
