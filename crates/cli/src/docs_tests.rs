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

/// Every fenced block of the pages, with its page.
fn page_blocks() -> Vec<(PathBuf, Block)> {
    pages()
        .into_iter()
        .flat_map(|page| {
            let text = std::fs::read_to_string(&page).expect("a page");
            blocks(&text).into_iter().map(move |b| (page.clone(), b))
        })
        .collect()
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
        let Some(split) = shlex::split(&line) else {
            out.push((first, vec![line]));
            continue;
        };
        let mut words: Vec<String> = Vec::new();
        let mut redirected = false;
        for w in split {
            if matches!(w.as_str(), "|" | "||" | "&&" | ";" | "&") {
                break;
            }
            if let Some(last) = w.strip_suffix(';') {
                words.push(last.to_string());
                break;
            }
            // A redirection and its file (`> top.csv`, `2>/dev/null`).
            if std::mem::take(&mut redirected) {
                continue;
            }
            if w.starts_with('>') || w.starts_with("2>") || w.starts_with('<') && w.len() > 1 {
                redirected = matches!(w.as_str(), ">" | ">>" | "2>");
                continue;
            }
            words.push(w);
        }
        if let Some(c) = words.iter().position(|w| w.starts_with('#')) {
            words.truncate(c);
        }
        if words
            .iter()
            .any(|w| w.starts_with('[') || w.starts_with('<'))
        {
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
    for (page, b) in page_blocks()
        .iter()
        .filter(|(_, b)| !b.lang.starts_with("toml"))
    {
        for (line, words) in command_lines(b) {
            seen += 1;
            if let Err(e) = Cli::try_parse_from(&words) {
                use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
                if !matches!(e.kind(), DisplayHelp | DisplayVersion) {
                    let why = e.to_string();
                    let why = why.lines().next().unwrap_or_default().to_string();
                    bad.push(format!(
                        "{}:{line}: {}: {why}",
                        page.display(),
                        words.join(" ")
                    ));
                }
            }
        }
    }
    assert!(seen > 50, "only {seen} command lines found");
    assert!(
        bad.is_empty(),
        "{} lines do not parse:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn every_topology_key_in_the_readme_and_the_guides_is_the_schemas() {
    let mut bad = Vec::new();
    let mut seen = 0;
    // (A block that says it is another program's file, `# /etc/…` on
    // its first line, is no topology.)
    let theirs = |b: &Block| {
        let first = b.text.lines().next().unwrap_or_default();
        first.starts_with("# /") && !first.contains("hvnet")
    };
    for (page, b) in page_blocks()
        .iter()
        .filter(|(_, b)| b.lang.starts_with("toml") && !theirs(b))
    {
        seen += 1;
        // A fragment gets a name if it has none; whatever else it lacks
        // is not this test's business, an unknown key is.
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
    assert!(seen > 10, "only {seen} TOML blocks found");
    assert!(
        bad.is_empty(),
        "{} blocks name keys the schema does not have:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Each section of a topology file, a document whose only key in that
/// section is an unknown one: the schema's refusal lists its keys.
const SECTIONS: &[(&str, &str)] = &[
    ("top", "zz_probe = 1\n"),
    ("[[vm]]", "[[vm]]\nzz_probe = 1\n"),
    ("[[uplink]]", "[[uplink]]\nzz_probe = 1\n"),
    (
        "[uplink.vxlan]",
        "[[uplink]]\nname = \"u\"\ndevice = \"lo\"\n[uplink.vxlan]\nzz_probe = 1\n",
    ),
    ("[[host]]", "[[host]]\nzz_probe = 1\n"),
    ("[frr]", "[frr]\nzz_probe = 1\n"),
    ("[switch]", "[switch]\nzz_probe = 1\n"),
    ("[libvirt]", "[libvirt]\nzz_probe = 1\n"),
    ("[[security_group]]", "[[security_group]]\nzz_probe = 1\n"),
    (
        "rules",
        "[[security_group]]\nname = \"g\"\nrules = [{ zz_probe = 1 }]\n",
    ),
    ("[conntrack]", "[conntrack]\nzz_probe = 1\n"),
    ("[[mirror]]", "[[mirror]]\nzz_probe = 1\n"),
    ("[ipfix]", "[ipfix]\nzz_probe = 1\n"),
    ("[[tenant]]", "[[tenant]]\nzz_probe = 1\n"),
];

/// The keys the schema takes in a section (from its refusal of an
/// unknown one).
fn schema_keys(probe: &str) -> Vec<String> {
    let doc = format!("name = \"probe\"\n{probe}");
    let e = hvnet_control::topology::parse(&doc).expect_err("an unknown key is refused");
    let why = e.to_string();
    let list = why
        .split_once("expected one of ")
        .or_else(|| why.split_once("expected "))
        .unwrap_or_else(|| panic!("{probe}: {why}"))
        .1;
    list.split(", ")
        .map(|k| k.trim().trim_matches('`').to_string())
        .filter(|k| !k.is_empty())
        .collect()
}

/// The keys a section of the reference page lists: the first column's
/// `key` (or `key1`, `key2`) of the table rows under its heading (`##`
/// or `###`), up to the next heading.
fn page_keys(page: &str, heading: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut inside = false;
    for l in page.lines() {
        if l.starts_with('#') {
            inside = l.trim_start_matches('#').trim().trim_matches('`') == heading;
            continue;
        }
        if !inside || !l.starts_with("| `") {
            continue;
        }
        let first = l.split('|').nth(1).unwrap_or_default();
        keys.extend(
            first
                .split(',')
                .map(|k| k.trim().trim_matches('`').to_string())
                .filter(|k| !k.is_empty()),
        );
    }
    keys.sort();
    keys.dedup();
    keys
}

#[test]
fn the_topology_reference_lists_every_key_of_the_schema_and_no_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let page = std::fs::read_to_string(root.join("docs/guide/topology-reference.md"))
        .expect("docs/guide/topology-reference.md");
    let mut bad = Vec::new();
    for (section, probe) in SECTIONS {
        let heading = if *section == "top" {
            "Top level"
        } else {
            section
        };
        let mut schema = schema_keys(probe);
        schema.sort();
        let listed = page_keys(&page, heading);
        for k in schema.iter().filter(|k| !listed.contains(k)) {
            bad.push(format!("{section}: `{k}` is not on the page"));
        }
        for k in listed.iter().filter(|k| !schema.contains(k)) {
            bad.push(format!(
                "{section}: `{k}` is on the page but not in the schema"
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "docs/guide/topology-reference.md:\n{}",
        bad.join("\n")
    );
}
