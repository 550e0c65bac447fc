//! ghz's summary of a run, in ghz's words and order: count, total, slowest,
//! fastest, average, requests/sec; the response time histogram; the
//! latency distribution; the status code and error distributions.

use std::{collections::BTreeMap, time::Duration};

use hdrhistogram::Histogram;

/// What a run measured, latencies in microseconds.
pub struct Report {
    name: String,
    latency: Histogram<u64>,
    codes: BTreeMap<String, u64>,
    errors: BTreeMap<String, u64>,
    /// Wall time of the whole run.
    pub total: Duration,
}

/// A status code as ghz prints it (`OK`, `Unavailable`, `DeadlineExceeded`).
pub fn code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".into(),
        other => format!("{other:?}"),
    }
}

impl Report {
    pub fn new(name: &str) -> Report {
        Report {
            name: name.to_owned(),
            latency: Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram"),
            codes: BTreeMap::new(),
            errors: BTreeMap::new(),
            total: Duration::ZERO,
        }
    }

    /// Adds one worker's calls.
    pub fn add(&mut self, latency: &Histogram<u64>, codes: BTreeMap<String, u64>, errors: BTreeMap<String, u64>) {
        self.latency.add(latency).expect("same bounds");
        for (code, n) in codes {
            *self.codes.entry(code).or_default() += n;
        }
        for (error, n) in errors {
            *self.errors.entry(error).or_default() += n;
        }
    }

    pub fn print(&self) {
        let ms = |us: f64| us / 1000.0;
        let count = self.latency.len();
        println!("{}\n\nSummary:", self.name);
        println!("  Count:\t{count}");
        println!("  Total:\t{:.2} ms", self.total.as_secs_f64() * 1000.0);
        if count == 0 {
            return;
        }
        println!("  Slowest:\t{:.2} ms", ms(self.latency.max() as f64));
        println!("  Fastest:\t{:.2} ms", ms(self.latency.min() as f64));
        println!("  Average:\t{:.2} ms", ms(self.latency.mean()));
        println!("  Requests/sec:\t{:.2}", count as f64 / self.total.as_secs_f64());
        println!("\nResponse time histogram:");
        let buckets = self.buckets(10);
        let most = buckets.iter().map(|(_, n)| *n).max().unwrap_or(1).max(1);
        for (upper, n) in &buckets {
            let bar = "∎".repeat((40 * n / most) as usize);
            println!("  {:.3} [{n}]\t|{bar}", ms(*upper as f64));
        }
        println!("\nLatency distribution:");
        for percent in [10, 25, 50, 75, 90, 95, 99] {
            let at = self.latency.value_at_quantile(f64::from(percent) / 100.0);
            println!("  {percent} % in {:.2} ms ", ms(at as f64));
        }
        println!("\nStatus code distribution:");
        for (code, n) in &self.codes {
            println!("  [{code}]\t{n} responses");
        }
        if !self.errors.is_empty() {
            println!("\nError distribution:");
            for (error, n) in &self.errors {
                println!("  [{n}]\t{error}");
            }
        }
    }

    /// Buckets of equal width from the fastest call to the slowest, as ghz
    /// draws them: each its upper bound (the first the fastest call, the last
    /// the slowest) and how many calls fell in it since the previous one.
    fn buckets(&self, n: u64) -> Vec<(u64, u64)> {
        let (low, high) = (self.latency.min(), self.latency.max());
        let mut buckets: Vec<(u64, u64)> = (0..n).map(|i| (low + (high - low) * i / n, 0)).collect();
        buckets.push((high, 0));
        for value in self.latency.iter_recorded() {
            // A recorded value stands for a few equivalent ones: take the lowest,
            // which is what `min` reports for the fastest call, or the fastest
            // would land in the second bucket.
            let at = self.latency.lowest_equivalent(value.value_iterated_to());
            let index = buckets.partition_point(|(upper, _)| *upper < at).min(n as usize);
            buckets[index].1 += value.count_at_value();
        }
        buckets
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(micros: &[u64]) -> Report {
        let mut latency = Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram");
        for us in micros {
            latency.record(*us).expect("in bounds");
        }
        let mut report = Report::new("test");
        report.add(&latency, BTreeMap::new(), BTreeMap::new());
        report
    }

    #[test]
    fn the_fastest_call_is_in_the_first_bucket_and_the_slowest_in_the_last() {
        // 3,000 us is kept in a slot 2 us wide, which it shares with 3,001.
        let report = report(&[3_000, 3_001, 3_500, 4_000, 4_950, 5_003]);
        let buckets = report.buckets(10);
        assert_eq!(buckets.len(), 11);
        assert_eq!(buckets[0], (report.latency.min(), 2), "{buckets:?}");
        assert_eq!(buckets[10], (report.latency.max(), 2), "{buckets:?}");
        assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), 6, "{buckets:?}");
        assert!(buckets.windows(2).all(|pair| pair[0].0 < pair[1].0), "{buckets:?}");
        // The sixth ends half-way, at 3,000 + 2,003 × 5/10.
        assert_eq!(buckets[5], (4_001, 1), "{buckets:?}");
    }

    #[test]
    fn calls_that_all_took_as_long_fill_the_first_bucket() {
        let buckets = report(&[700, 700, 700]).buckets(10);
        assert_eq!(buckets[0], (700, 3), "{buckets:?}");
        assert!(buckets[1..].iter().all(|(_, n)| *n == 0), "{buckets:?}");
    }
}
