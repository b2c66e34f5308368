//! One producer/consumer run of `GlobalSlub` (or without sheaves) with its
//! SLUB statistics, for probing one shape outside the table:
//!
//! ```sh
//! cargo run --release -p mm-bench --example prodcons_probe -- 64 64 sheaves
//! ```
//!
//! Arguments: object size, batch (1 = one by one), `sheaves` or `nosheaves`.
use mm_bench::tables::slub::{
    layout, prodcons_stats, seed_format, SlubHeap, GLOBAL_SLUB, GLOBAL_SLUB_NO_SHEAVES,
};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let size: usize = a.get(1).map_or(64, |s| s.parse().expect("size"));
    let batch: usize = a.get(2).map_or(1, |s| s.parse().expect("batch"));
    let which = a.get(3).map_or("sheaves", |s| s.as_str());
    let objects: u64 = a.get(4).map_or(1 << 21, |s| s.parse().expect("objects"));
    let l = layout(size);
    let class = slub::kmalloc_class(size, 8).expect("a kmalloc class");
    for round in 0..3 {
        let run = if which == "sheaves" {
            let c = &GLOBAL_SLUB.kmalloc().caches()[class];
            prodcons_stats(
                &SlubHeap(&GLOBAL_SLUB),
                l,
                objects,
                batch,
                c,
                64,
                &[0, 1],
                true,
            )
        } else {
            let c = &GLOBAL_SLUB_NO_SHEAVES.kmalloc().caches()[class];
            prodcons_stats(
                &SlubHeap(&GLOBAL_SLUB_NO_SHEAVES),
                l,
                objects,
                batch,
                c,
                64,
                &[0, 1],
                true,
            )
        };
        println!(
            "round {round}: {size} B x{batch} {which}: {:.1} ns/object",
            run.secs * 1e9 / run.objects as f64
        );
        if round == 2 {
            for line in seed_format(&run) {
                println!("   {line}");
            }
        }
    }
}
