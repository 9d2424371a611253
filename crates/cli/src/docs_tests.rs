//! The docs kept true to the program: every `hvnet …` command line in the
//! README's and the guides' fenced blocks is one the argument parser
//! takes, and every key of their TOML blocks is one the topology's schema
//! knows. (What a command does is the system tests' business.)

use super::Cli;
use clap::Parser;
use std::path::{Path, PathBuf};

/// The pages a new user reads: the README and the guides.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut v = vec![root.join("README.md"), root.join("docs/operations.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root.join("docs/guide"))
        .expect("docs/guide")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    v.extend(guides);
    v
}

/// A fenced block: its info string, its first line's number, its text.
struct Block {
    lang: String,
    line: usize,
    text: String,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, l) in page.lines().enumerate() {
        let t = l.trim_start();
        match (&mut open, t.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    lang: info.trim().to_string(),
                    line: i + 2,
                    text: String::new(),
                })
            }
            (Some(_), Some(_)) => out.extend(open.take()),
            (Some(b), None) => {
                b.text.push_str(l);
                b.text.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// The `hvnet` command lines of a shell block, with their line numbers:
/// a prompt (`$ `, `# `) taken off, continued lines joined, each cut at
/// its first pipe, list or redirection. A synopsis (`[VM]`, `…`) is no
/// command line.
fn command_lines(b: &Block) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut joined = String::new();
    let mut first = 0;
    for (i, l) in b.text.lines().enumerate() {
        if joined.is_empty() {
            first = b.line + i;
        }
        let l = l.trim();
        let l = l
            .strip_prefix("$ ")
            .or_else(|| l.strip_prefix("# "))
            .unwrap_or(l);
        if let Some(head) = l.strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            continue;
        }
        joined.push_str(l);
        let line = std::mem::take(&mut joined);
        if !line.starts_with("hvnet ") || line.contains('…') || line.contains("...") {
            continue;
        }
        let Some(words) = shlex::split(&line) else {
            out.push((first, vec![line]));
            continue;
        };
        let mut words: Vec<String> = words
            .into_iter()
            .take_while(|w| !matches!(w.as_str(), "|" | "||" | "&&" | ";" | "&"))
            .filter(|w| !w.starts_with('>') && !w.starts_with("2>"))
            .collect();
        if let Some(c) = words.iter().position(|w| w.starts_with('#')) {
            words.truncate(c);
        }
        if words.iter().any(|w| w.starts_with('[') || w.starts_with('<')) {
            continue;
        }
        out.push((first, words));
    }
    out
}

#[test]
fn every_command_line_in_the_readme_and_the_guides_parses() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        for b in blocks(&text).iter().filter(|b| !b.lang.starts_with("toml")) {
            for (line, words) in command_lines(b) {
                seen += 1;
                if let Err(e) = Cli::try_parse_from(&words) {
                    use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                    if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                        let why = e.to_string();
                        let why = why.lines().next().unwrap_or_default().to_string();
                        bad.push(format!("{}:{line}: {}: {why}", page.display(), words.join(" ")));
                    }
                }
            }
        }
    }
    assert!(seen > 50, "only {seen} command lines found");
    assert!(bad.is_empty(), "{} lines do not parse:\n{}", bad.len(), bad.join("\n"));
}

#[test]
fn every_topology_key_in_the_readme_and_the_guides_is_the_schemas() {
    let mut bad = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        for b in blocks(&text).iter().filter(|b| b.lang.starts_with("toml")) {
            seen += 1;
            // A fragment gets a name if it has none; whatever else it
            // lacks is not this test's business, an unknown key is.
            let doc = if b.text.lines().any(|l| l.trim_start().starts_with("name =")) {
                b.text.clone()
            } else {
                format!("name = \"docs\"\n{}", b.text)
            };
            if let Err(e) = hvnet_control::topology::parse(&doc) {
                let why = e.to_string();
                if why.contains("unknown field") || why.contains("unknown key") {
                    bad.push(format!("{}:{}: {why}", page.display(), b.line));
                }
            }
        }
    }
    assert!(seen > 10, "only {seen} TOML blocks found");
    assert!(bad.is_empty(), "{} blocks name keys the schema does not have:\n{}", bad.len(), bad.join("\n"));
}
