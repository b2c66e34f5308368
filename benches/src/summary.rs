//! The run's end: the verdict summary (every table's targets, missed
//! first), the warnings with the load average, one line of
//! `history.jsonl` per run (with the git revision) and `--compare`.

use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::time::Duration;

use crate::measure::{
    fmt_num, json_str, summary_order, verdict_line, Config, Machine, Report, Status, Verdict,
};

/// The summary of one run: what the history keeps and the summary prints.
#[derive(Clone, Debug)]
pub struct Run {
    /// `quick`, `default` or `full`.
    pub mode: &'static str,
    /// `git describe --always --dirty` of the source tree (the workspace
    /// the runner was built in, asked at run time), or `unknown`.
    pub revision: String,
    /// Seconds since the Unix epoch when the summary was made.
    pub unix_time: u64,
    /// The run's wall time in seconds.
    pub secs: f64,
    /// The tables run, in order.
    pub tables: Vec<String>,
    /// /proc/loadavg at the start.
    pub load_start: String,
    /// /proc/loadavg at the end.
    pub load_end: String,
    /// Every table's verdicts, in table order.
    pub verdicts: Vec<Verdict>,
    /// Every table's warnings.
    pub warnings: Vec<String>,
}

/// `git describe --always --dirty` in the workspace, or `unknown`.
pub fn git_revision() -> String {
    std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// /proc/loadavg's three averages, or `?`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

impl Run {
    /// The summary of `reports` (already [`check`](Report::check)ed).
    pub fn new(cfg: &Config, machine: &Machine, reports: &[Report], elapsed: Duration) -> Run {
        Run {
            mode: cfg.mode(),
            revision: git_revision(),
            unix_time: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            secs: elapsed.as_secs_f64(),
            tables: reports.iter().map(|r| r.table.to_string()).collect(),
            load_start: machine.loadavg.clone(),
            load_end: loadavg(),
            verdicts: reports.iter().flat_map(|r| r.verdicts.clone()).collect(),
            warnings: reports.iter().flat_map(|r| r.warnings.clone()).collect(),
        }
    }

    /// How many verdicts have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.verdicts.iter().filter(|v| v.status == status).count()
    }

    /// The headline: `N targets: a met, b MISSED, c noisy (no verdict)`.
    pub fn headline(&self) -> String {
        format!(
            "{} targets: {} met, {} MISSED, {} noisy (no verdict)",
            self.verdicts.len(),
            self.count(Status::Met),
            self.count(Status::Missed),
            self.count(Status::Noisy)
        )
    }

    /// The summary printed at the end of the run.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "== summary: {} ({} run, revision {}) ==",
            self.headline(),
            self.mode,
            self.revision
        );
        let _ = writeln!(
            out,
            "{:<6}  {:<14} {:<58} {:>9}    {:>9} {:<8}  {:>7}",
            "status",
            "table",
            "target",
            "measured",
            "target",
            "unit",
            "vs best peer (speed; >1 = faster)"
        );
        for v in summary_order(&self.verdicts) {
            let _ = writeln!(out, "{}", verdict_line(v));
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(
                out,
                "WARNINGS (load average at the start {}, at the end {}; 2 CPUs are busy at 2.0):",
                self.load_start, self.load_end
            );
            for w in &self.warnings {
                let _ = writeln!(out, "  - {w}");
            }
        }
        out
    }

    /// The run as one JSON line of `history.jsonl`.
    pub fn to_json(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"type\":\"run\",\"revision\":{},\"unix_time\":{},\"mode\":{},\"secs\":{:.1},\"load_start\":{},\"load_end\":{},\"tables\":[{}],\"verdicts\":[",
            json_str(&self.revision),
            self.unix_time,
            json_str(self.mode),
            self.secs,
            json_str(&self.load_start),
            json_str(&self.load_end),
            self.tables
                .iter()
                .map(|t| json_str(t))
                .collect::<Vec<_>>()
                .join(",")
        );
        for (i, v) in self.verdicts.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"table\":{},\"what\":{},\"measured\":{},\"target\":{},\"unit\":{},\"higher_is_better\":{},\"vs_best_peer\":{},\"status\":{}}}",
                json_str(v.table),
                json_str(&v.what),
                json_num(v.measured),
                json_num(v.target),
                json_str(v.unit),
                v.higher_is_better,
                v.vs_best_peer.map_or("null".into(), json_num),
                json_str(v.status.label())
            );
        }
        s.push_str("],\"warnings\":[");
        s.push_str(
            &self
                .warnings
                .iter()
                .map(|w| json_str(w))
                .collect::<Vec<_>>()
                .join(","),
        );
        s.push_str("]}");
        s
    }

    /// Appends the run to `<dir>/history.jsonl`; returns its path.
    pub fn append_history(&self, dir: &Path) -> io::Result<std::path::PathBuf> {
        use std::io::Write as _;
        std::fs::create_dir_all(dir)?;
        let path = dir.join("history.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        writeln!(f, "{}", self.to_json())?;
        Ok(path)
    }
}

fn json_num(x: f64) -> String {
    if x.is_finite() {
        format!("{x:.4}")
    } else {
        "null".into()
    }
}

/// One verdict as the history keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Past {
    /// Table.
    pub table: String,
    /// Target.
    pub what: String,
    /// Measured figure (`None`: not a number).
    pub measured: Option<f64>,
    /// Unit.
    pub unit: String,
    /// Direction of the target.
    pub higher_is_better: bool,
    /// `met`, `MISSED` or `noisy`.
    pub status: String,
}

/// One run of a `history.jsonl`: its revision, mode and verdicts.
#[derive(Clone, Debug, PartialEq)]
pub struct PastRun {
    /// The git revision.
    pub revision: String,
    /// The mode.
    pub mode: String,
    /// The verdicts.
    pub verdicts: Vec<Past>,
}

/// Parses one line of `history.jsonl`.
pub fn parse_history_line(line: &str) -> Result<PastRun, String> {
    let v = json::parse(line)?;
    let s = |v: &json::Value, k: &str| {
        v.get(k)
            .and_then(json::Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let verdicts = v
        .get("verdicts")
        .and_then(json::Value::as_array)
        .ok_or("no verdicts")?
        .iter()
        .map(|x| Past {
            table: s(x, "table"),
            what: s(x, "what"),
            measured: x.get("measured").and_then(json::Value::as_f64),
            unit: s(x, "unit"),
            higher_is_better: matches!(x.get("higher_is_better"), Some(json::Value::Bool(true))),
            status: s(x, "status"),
        })
        .collect();
    Ok(PastRun {
        revision: s(&v, "revision"),
        mode: s(&v, "mode"),
        verdicts,
    })
}

/// The last run recorded in the history file `path`.
pub fn last_run(path: &Path) -> Result<PastRun, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| format!("{}: empty", path.display()))?;
    parse_history_line(line).map_err(|e| format!("{}: {e}", path.display()))
}

/// The change per target from `old` to `new`: one line per target of
/// either, matched by table and target text; the change is in the
/// target's direction (`+` = better).
pub fn compare(old: &PastRun, new: &PastRun) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "== compare: {} ({}) -> {} ({}); change in the target's direction, + = better ==",
        old.revision, old.mode, new.revision, new.mode
    );
    for n in &new.verdicts {
        let o = old
            .verdicts
            .iter()
            .find(|o| o.table == n.table && o.what == n.what);
        let change = match (o.and_then(|o| o.measured), n.measured) {
            (Some(a), Some(b)) if a > 0.0 && b > 0.0 => {
                let r = if n.higher_is_better { b / a } else { a / b };
                format!("{:+.1}%", (r - 1.0) * 100.0)
            }
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<14} {:<58} {:>9} -> {:>9} {:<8} {:>8}  {} -> {}",
            n.table,
            n.what,
            o.and_then(|o| o.measured).map_or("-".into(), fmt_num),
            n.measured.map_or("-".into(), fmt_num),
            n.unit,
            change,
            o.map_or("(new)", |o| o.status.as_str()),
            n.status
        );
    }
    for o in &old.verdicts {
        if !new
            .verdicts
            .iter()
            .any(|n| n.table == o.table && n.what == o.what)
        {
            let _ = writeln!(out, "{:<14} {:<58} (not measured now)", o.table, o.what);
        }
    }
    out
}

/// A minimal JSON reader for `history.jsonl` (the crate writes JSON by
/// hand and has no JSON dependency).
pub mod json {
    /// A JSON value.
    #[derive(Clone, Debug, PartialEq)]
    pub enum Value {
        /// `null`.
        Null,
        /// `true` / `false`.
        Bool(bool),
        /// A number.
        Num(f64),
        /// A string.
        Str(String),
        /// An array.
        Arr(Vec<Value>),
        /// An object, keys in order.
        Obj(Vec<(String, Value)>),
    }

    impl Value {
        /// The member `k` of an object.
        pub fn get(&self, k: &str) -> Option<&Value> {
            match self {
                Value::Obj(m) => m.iter().find(|(x, _)| x == k).map(|(_, v)| v),
                _ => None,
            }
        }
        /// The string, if one.
        pub fn as_str(&self) -> Option<&str> {
            match self {
                Value::Str(s) => Some(s),
                _ => None,
            }
        }
        /// The number, if one.
        pub fn as_f64(&self) -> Option<f64> {
            match self {
                Value::Num(x) => Some(*x),
                _ => None,
            }
        }
        /// The array, if one.
        pub fn as_array(&self) -> Option<&[Value]> {
            match self {
                Value::Arr(a) => Some(a),
                _ => None,
            }
        }
    }

    /// Parses one JSON document.
    pub fn parse(s: &str) -> Result<Value, String> {
        let mut p = P {
            b: s.as_bytes(),
            i: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.i != p.b.len() {
            return Err(format!("trailing characters at {}", p.i));
        }
        Ok(v)
    }

    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }

    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
                self.i += 1;
            }
        }
        fn eat(&mut self, c: u8) -> Result<(), String> {
            self.ws();
            if self.b.get(self.i) == Some(&c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected '{}' at {}", c as char, self.i))
            }
        }
        fn value(&mut self) -> Result<Value, String> {
            self.ws();
            match self.b.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    let mut m = Vec::new();
                    self.ws();
                    if self.b.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(Value::Obj(m));
                    }
                    loop {
                        self.ws();
                        let k = self.string()?;
                        self.eat(b':')?;
                        m.push((k, self.value()?));
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(Value::Obj(m));
                            }
                            _ => return Err(format!("bad object at {}", self.i)),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    let mut a = Vec::new();
                    self.ws();
                    if self.b.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(Value::Arr(a));
                    }
                    loop {
                        a.push(self.value()?);
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(Value::Arr(a));
                            }
                            _ => return Err(format!("bad array at {}", self.i)),
                        }
                    }
                }
                Some(b'"') => Ok(Value::Str(self.string()?)),
                Some(b't') if self.b[self.i..].starts_with(b"true") => {
                    self.i += 4;
                    Ok(Value::Bool(true))
                }
                Some(b'f') if self.b[self.i..].starts_with(b"false") => {
                    self.i += 5;
                    Ok(Value::Bool(false))
                }
                Some(b'n') if self.b[self.i..].starts_with(b"null") => {
                    self.i += 4;
                    Ok(Value::Null)
                }
                _ => {
                    let st = self.i;
                    while self.i < self.b.len()
                        && matches!(
                            self.b[self.i],
                            b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                        )
                    {
                        self.i += 1;
                    }
                    std::str::from_utf8(&self.b[st..self.i])
                        .ok()
                        .and_then(|t| t.parse().ok())
                        .map(Value::Num)
                        .ok_or_else(|| format!("bad value at {st}"))
                }
            }
        }
        fn string(&mut self) -> Result<String, String> {
            self.eat(b'"')?;
            let mut out = String::new();
            loop {
                let rest = std::str::from_utf8(&self.b[self.i..]).map_err(|e| e.to_string())?;
                let mut chars = rest.char_indices();
                let (k, c) = chars.next().ok_or("unterminated string")?;
                debug_assert_eq!(k, 0);
                self.i += c.len_utf8();
                match c {
                    '"' => return Ok(out),
                    '\\' => {
                        let e = *self.b.get(self.i).ok_or("bad escape")?;
                        self.i += 1;
                        match e {
                            b'n' => out.push('\n'),
                            b'r' => out.push('\r'),
                            b't' => out.push('\t'),
                            b'b' => out.push('\u{8}'),
                            b'f' => out.push('\u{c}'),
                            b'u' => {
                                let h = self.b.get(self.i..self.i + 4).ok_or("bad \\u")?;
                                let h = std::str::from_utf8(h).map_err(|e| e.to_string())?;
                                let c = u32::from_str_radix(h, 16).map_err(|e| e.to_string())?;
                                out.push(char::from_u32(c).unwrap_or('\u{fffd}'));
                                self.i += 4;
                            }
                            other => out.push(other as char),
                        }
                    }
                    c => out.push(c),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Verdict;

    fn run(measured: f64) -> Run {
        let mut v = Verdict::at_most("N = 1: \"x\" <= y", measured, 10.0, "ns").vs_peer(1.5);
        v.table = "pages";
        Run {
            mode: "quick",
            revision: "abc123".into(),
            unix_time: 1,
            secs: 2.0,
            tables: vec!["pages".into()],
            load_start: "1.00 1.00 1.00".into(),
            load_end: "2.00 1.00 1.00".into(),
            verdicts: vec![v],
            warnings: vec!["pages: a \\ warning".into()],
        }
    }

    #[test]
    fn history_round_trips_and_compares() {
        let old = parse_history_line(&run(8.0).to_json()).unwrap();
        let new = parse_history_line(&run(4.0).to_json()).unwrap();
        assert_eq!(old.revision, "abc123");
        assert_eq!(old.verdicts[0].what, "N = 1: \"x\" <= y");
        assert_eq!(old.verdicts[0].measured, Some(8.0));
        let c = compare(&old, &new);
        assert!(c.contains("+100.0%"), "{c}");
        let text = run(12.0).to_text();
        assert!(
            text.contains("0 met, 1 MISSED") || text.contains("MISSED"),
            "{text}"
        );
        assert!(text.contains("WARNINGS"));
    }

    #[test]
    fn json_reader_reads_values() {
        let v = json::parse(r#"{"a":[1,-2.5e1,true,null],"b":"\u00e9\n"}"#).unwrap();
        assert_eq!(v.get("b").and_then(json::Value::as_str), Some("é\n"));
        assert_eq!(
            v.get("a").and_then(json::Value::as_array).map(|a| a.len()),
            Some(4)
        );
        assert!(json::parse("{").is_err());
    }
}
