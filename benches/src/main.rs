//! `cargo run --release -p mm-bench [-- OPTIONS]`: reproduces the seeds'
//! tables on this machine (see `--help`).

use std::process::ExitCode;
use std::time::Instant;

use mm_bench::measure::{self, Config, Ctx, Machine};
use mm_bench::tables::{self, Table};
use mm_bench::{charts, summary};

const USAGE: &str = "\
mm-bench: reproduce the seeds' tables of the allocator family on this machine

usage: cargo run --release -p mm-bench -- [OPTIONS]

options:
  --quick          CI smoke mode: short batches, few rounds (seconds in all)
  --full           every size and shape, 10 ms batches, 15 rounds (the complete
                   set; the default run thins the sweeps to fit about 3 minutes)
  --table NAME     run only table NAME (repeatable; see --list)
  --list           list the tables and exit
  --rounds N       interleaved rounds per table (default 9, full 15, quick 5)
  --noise X        re-measure a case whose rounds spread more than X (slowest /
                   fastest; default 2), flag it noisy if it still does (0: never)
  --compare FILE   after the run, print the change per target against the last
                   run recorded in FILE (a copy of an older history.jsonl)
  --cpu N          pin the measuring thread to CPU N (default: the first allowed)
  --no-pin         do not pin threads to CPUs
  --out DIR        where to write NAME.csv and NAME.jsonl
                   (default: $CARGO_TARGET_DIR or <workspace>/target, + /mm-bench)
  -h, --help       this text
";

#[derive(Debug, Default, PartialEq)]
struct Args {
    quick: bool,
    full: bool,
    list: bool,
    help: bool,
    no_pin: bool,
    tables: Vec<String>,
    rounds: Option<usize>,
    cpu: Option<usize>,
    out: Option<String>,
    noise: Option<f64>,
    compare: Option<String>,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut a = Args::default();
    while let Some(arg) = it.next() {
        // Accept both `--opt value` and `--opt=value`.
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--quick" => a.quick = true,
            "--full" => a.full = true,
            "--compare" => a.compare = Some(value("--compare")?),
            "--noise" => {
                let v = value("--noise")?;
                a.noise = Some(
                    v.parse()
                        .map_err(|_| format!("--noise: bad number {v:?}"))?,
                );
            }
            "--list" => a.list = true,
            "--no-pin" => a.no_pin = true,
            "-h" | "--help" => a.help = true,
            "--table" => a.tables.push(value("--table")?),
            "--out" => a.out = Some(value("--out")?),
            "--rounds" => {
                let v = value("--rounds")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("--rounds: bad number {v:?}"))?;
                a.rounds = Some(n.max(1));
            }
            "--cpu" => {
                let v = value("--cpu")?;
                a.cpu = Some(v.parse().map_err(|_| format!("--cpu: bad number {v:?}"))?);
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(a)
}

fn main() -> ExitCode {
    // The slub-larson, slub-threads and memory-return tables run each
    // allocator in a child: this binary with a hidden first argument (not
    // in --help).
    if let Some(code) = mm_bench::tables::child_main() {
        return code;
    }
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("mm-bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    if args.list {
        for t in tables::TABLES {
            println!("{:<12} {}", t.name(), t.about());
        }
        return ExitCode::SUCCESS;
    }

    let selected: Vec<&dyn Table> = if args.tables.is_empty() {
        tables::TABLES
            .iter()
            .copied()
            .filter(|t| args.full || args.quick || t.in_default_run())
            .collect()
    } else {
        let mut v = Vec::new();
        for name in &args.tables {
            match tables::find(name) {
                Some(t) => v.push(t),
                None => {
                    eprintln!("mm-bench: no table {name:?}; --list shows them");
                    return ExitCode::from(2);
                }
            }
        }
        v
    };

    let mut cfg = if args.quick {
        Config::quick()
    } else if args.full {
        Config::full()
    } else {
        Config::standard()
    };
    if let Some(x) = args.noise {
        cfg.noise = x;
    }
    if let Some(r) = args.rounds {
        cfg.rounds = r;
    }
    cfg.pin = !args.no_pin;
    if let Some(out) = &args.out {
        cfg.out_dir = out.into();
    }

    let start = Instant::now();
    let mut machine = Machine::probe(&cfg);
    if cfg.pin {
        let cpu = args
            .cpu
            .or_else(|| machine.allowed_cpus.first().copied())
            .unwrap_or(0);
        match measure::pin_current_thread(cpu) {
            // Keep the pinned CPU first: two-thread cases use the first two.
            Ok(()) => {
                machine.allowed_cpus.retain(|&c| c != cpu);
                machine.allowed_cpus.insert(0, cpu);
            }
            Err(e) => eprintln!("mm-bench: cannot pin to CPU {cpu}: {e}; running unpinned"),
        }
    }

    println!("mm-bench: the seeds' tables, measured on this machine");
    machine.print();
    println!(
        "    mode: {} ({} rounds of {:?} batches per case, interleaved; medians, [min .. max])",
        cfg.mode(),
        cfg.rounds,
        cfg.batch,
    );
    if cfg!(debug_assertions) {
        println!("WARNING: debug build; run with --release for meaningful figures");
    }
    if machine.allowed_cpus.len() < 2 {
        println!("WARNING: fewer than two CPUs allowed: two-thread rows time-share one CPU");
    }
    println!();

    let cx = Ctx {
        cfg: &cfg,
        machine: &machine,
    };
    let mut failed = false;
    let mut reports = Vec::new();
    for t in selected {
        let t0 = Instant::now();
        let mut report = t.run(&cx);
        report.check(&cfg);
        print!("{}", report.to_text());
        match report.write_files(&cfg.out_dir, &machine) {
            Ok([csv, jsonl]) => println!(
                "wrote {} and {} ({:.1} s)\n",
                csv.display(),
                jsonl.display(),
                t0.elapsed().as_secs_f64()
            ),
            Err(e) => {
                eprintln!(
                    "mm-bench: cannot write results to {}: {e}",
                    cfg.out_dir.display()
                );
                failed = true;
            }
        }
        reports.push(report);
    }
    let run = summary::Run::new(&cfg, &machine, &reports, start.elapsed());
    print!("{}", run.to_text());
    match charts::write_all(&cfg.out_dir, &machine, &reports, &run) {
        Ok(paths) => println!(
            "wrote {} charts and {}",
            paths.len() - 1,
            paths
                .last()
                .map_or(String::new(), |p| p.display().to_string())
        ),
        Err(e) => {
            eprintln!("mm-bench: cannot write the charts: {e}");
            failed = true;
        }
    }
    match run.append_history(&cfg.out_dir) {
        Ok(p) => println!("appended the summary to {}", p.display()),
        Err(e) => {
            eprintln!("mm-bench: cannot append to the history: {e}");
            failed = true;
        }
    }
    if let Some(old) = &args.compare {
        let now = summary::parse_history_line(&run.to_json()).expect("our own JSON parses");
        match summary::last_run(std::path::Path::new(old)) {
            Ok(prev) => print!("{}", summary::compare(&prev, &now)),
            Err(e) => {
                eprintln!("mm-bench: --compare: {e}");
                failed = true;
            }
        }
    }
    println!("mm-bench: done in {:.1} s", start.elapsed().as_secs_f64());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, String> {
        parse_args(s.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_the_documented_options() {
        let a =
            parse("--quick --table primitives --table=page --rounds 3 --cpu=1 --no-pin --out x")
                .unwrap();
        assert!(a.quick && a.no_pin && !a.list);
        assert_eq!(a.tables, ["primitives", "page"]);
        assert_eq!(
            (a.rounds, a.cpu, a.out.as_deref()),
            (Some(3), Some(1), Some("x"))
        );
        assert!(parse("--list").unwrap().list);
        assert!(parse("--table").is_err());
        assert!(parse("--rounds x").is_err());
        assert!(parse("--bogus").is_err());
        assert_eq!(parse("").unwrap(), Args::default());
    }
}
