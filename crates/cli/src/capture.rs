//! Reading and writing capture files for the offline tools.
//!
//! Frames are Ethernet (LINKTYPE_ETHERNET) without a virtio-net header. A
//! capture that ends in the middle of a record still yields every complete
//! frame before the damage; the damage is reported with its byte offset.

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapParser, PcapWriter};
use pcap_file::DataLink;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One captured frame.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Capture timestamp.
    pub ts: Duration,
    /// The frame bytes as captured.
    pub data: Vec<u8>,
    /// The frame was cut short by the capture's snap length.
    pub snapped: bool,
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// A capture file problem.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file could not be written.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Not a pcap file.
    #[error("{path} is not a pcap capture ({reason}); pcapng is not supported, convert with `editcap -F pcap`")]
    NotPcap {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        reason: String,
    },
    /// Not Ethernet frames.
    #[error("{path} has link type {linktype:?}; only Ethernet (LINKTYPE_ETHERNET) captures are supported")]
    NotEthernet {
        /// The file.
        path: PathBuf,
        /// Its link type.
        linktype: DataLink,
    },
}

/// A capture that was read, possibly only in part.
pub struct Capture {
    /// The global header.
    pub header: PcapHeader,
    /// Every complete frame.
    pub frames: Vec<Frame>,
    /// Where the capture is damaged, if it is: byte offset and what is wrong.
    pub damage: Option<(usize, String)>,
}

/// Reads a whole capture.
pub fn read(path: &Path) -> Result<Capture, CaptureError> {
    let data = std::fs::read(path).map_err(|source| CaptureError::Read {
        path: path.into(),
        source,
    })?;
    let (mut rest, parser) = PcapParser::new(&data).map_err(|e| CaptureError::NotPcap {
        path: path.into(),
        reason: match e {
            pcap_file::PcapError::IncompleteBuffer => {
                "file shorter than the 24-byte pcap header".into()
            }
            other => other.to_string(),
        },
    })?;
    let header = parser.header();
    if header.datalink != DataLink::ETHERNET {
        return Err(CaptureError::NotEthernet {
            path: path.into(),
            linktype: header.datalink,
        });
    }
    let mut frames = Vec::new();
    let mut damage = None;
    while !rest.is_empty() {
        let offset = data.len() - rest.len();
        match parser.next_packet(rest) {
            Ok((r, p)) => {
                frames.push(Frame {
                    ts: p.timestamp,
                    snapped: (p.data.len() as u32) < p.orig_len,
                    data: p.data.into_owned(),
                });
                rest = r;
            }
            Err(e) => {
                let what = match e {
                    pcap_file::PcapError::IncompleteBuffer => {
                        format!(
                            "record {} is truncated ({} bytes left)",
                            frames.len(),
                            rest.len()
                        )
                    }
                    other => format!("record {}: {other}", frames.len()),
                };
                damage = Some((offset, what));
                break;
            }
        }
    }
    Ok(Capture {
        header,
        frames,
        damage,
    })
}

/// Writes frames to a new Ethernet capture with a snap length large enough
/// for 64 KiB coalesced frames.
pub struct Writer {
    inner: PcapWriter<std::io::BufWriter<std::fs::File>>,
    path: PathBuf,
}

impl Writer {
    /// Creates the output file.
    pub fn create(path: &Path, like: &PcapHeader) -> Result<Writer, CaptureError> {
        let f = std::fs::File::create(path).map_err(|e| CaptureError::Write {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let header = PcapHeader {
            snaplen: 262_144,
            datalink: DataLink::ETHERNET,
            ..*like
        };
        let inner = PcapWriter::with_header(std::io::BufWriter::new(f), header).map_err(|e| {
            CaptureError::Write {
                path: path.into(),
                reason: e.to_string(),
            }
        })?;
        Ok(Writer {
            inner,
            path: path.into(),
        })
    }

    /// Appends one frame.
    pub fn write(&mut self, ts: Duration, data: &[u8]) -> Result<(), CaptureError> {
        self.inner
            .write_packet(&PcapPacket::new(ts, data.len() as u32, data))
            .map(|_| ())
            .map_err(|e| CaptureError::Write {
                path: self.path.clone(),
                reason: e.to_string(),
            })
    }

    /// Flushes to disk.
    pub fn finish(self) -> Result<(), CaptureError> {
        use std::io::Write;
        let path = self.path.clone();
        self.inner
            .into_writer()
            .flush()
            .map_err(|e| CaptureError::Write {
                path,
                reason: e.to_string(),
            })
    }
}
