//! Where records go: JSON lines or an aligned table, written as they come.

use std::io::Write;

use super::{BenchError, Record};

/// Receives a suite's records one at a time.
pub(crate) trait Sink {
    /// Called once before a suite's first record, with a line saying what is
    /// measured and how.
    fn start(&mut self, heading: &str) -> Result<(), BenchError>;
    /// Called for every record, as soon as it is measured.
    fn record(&mut self, record: &Record) -> Result<(), BenchError>;
}

fn output(e: &std::io::Error) -> BenchError {
    BenchError::Output(e.kind())
}

/// One JSON object per line (the heading is not printed: the stream stays
/// machine-readable).
pub(crate) struct JsonLines<W: Write>(pub(crate) W);

impl<W: Write> Sink for JsonLines<W> {
    fn start(&mut self, _heading: &str) -> Result<(), BenchError> {
        Ok(())
    }

    fn record(&mut self, record: &Record) -> Result<(), BenchError> {
        // Serialising a struct of strings and numbers cannot fail except
        // through the writer.
        serde_json::to_writer(&mut self.0, record).map_err(|e| {
            BenchError::Output(e.io_error_kind().unwrap_or(std::io::ErrorKind::Other))
        })?;
        writeln!(self.0).map_err(|e| output(&e))?;
        self.0.flush().map_err(|e| output(&e))
    }
}

/// A table for people, one row per record, columns aligned.
pub(crate) struct Table<W: Write>(pub(crate) W);

impl<W: Write> Table<W> {
    fn row(&mut self, cells: [&str; 8]) -> Result<(), BenchError> {
        let [
            kernel,
            elements,
            time,
            gbps,
            reference,
            ref_time,
            ref_gbps,
            ratio,
        ] = cells;
        writeln!(
            self.0,
            "{kernel:<14} {elements:>9} {time:>10} {gbps:>8}   {reference:<8} {ref_time:>10} {ref_gbps:>8} {ratio:>7}"
        )
        .map_err(|e| output(&e))?;
        self.0.flush().map_err(|e| output(&e))
    }
}

impl<W: Write> Sink for Table<W> {
    fn start(&mut self, heading: &str) -> Result<(), BenchError> {
        writeln!(self.0, "{heading}\n").map_err(|e| output(&e))?;
        self.row([
            "kernel", "elements", "time", "GB/s", "ref", "ref time", "ref GB/s", "ratio",
        ])
    }

    fn record(&mut self, r: &Record) -> Result<(), BenchError> {
        self.row([
            r.kernel,
            &count(r.elements),
            &seconds(r.seconds),
            &format!("{:.2}", r.gbps),
            r.reference,
            &seconds(r.reference_seconds),
            &format!("{:.2}", r.reference_gbps),
            &format!("{:.2}x", r.ratio),
        ])
    }
}

/// An element count, with a binary suffix when it is a whole number of Ki,
/// Mi or Gi: `4 Ki`, `16 Mi`, `1000`.
pub(crate) fn count(n: usize) -> String {
    for (shift, unit) in [(30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if n >= 1 << shift && n.trailing_zeros() >= shift {
            return format!("{} {unit}", n >> shift);
        }
    }
    n.to_string()
}

/// A duration with three significant digits and a unit: `812 ns`, `1.52 µs`.
pub(crate) fn seconds(s: f64) -> String {
    let (value, unit) = if s >= 1.0 {
        (s, "s")
    } else if s >= 1e-3 {
        (s * 1e3, "ms")
    } else if s >= 1e-6 {
        (s * 1e6, "µs")
    } else {
        (s * 1e9, "ns")
    };
    let decimals = if value >= 100.0 {
        0
    } else if value >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_use_binary_suffixes_only_when_exact() {
        assert_eq!(count(4096), "4 Ki");
        assert_eq!(count(256 << 10), "256 Ki");
        assert_eq!(count(16 << 20), "16 Mi");
        assert_eq!(count(1000), "1000");
        assert_eq!(count(4097), "4097");
        assert_eq!(count(3 << 29), "1536 Mi");
    }

    #[test]
    fn durations_have_three_significant_digits() {
        assert_eq!(seconds(812e-9), "812 ns");
        assert_eq!(seconds(1.523e-6), "1.52 µs");
        assert_eq!(seconds(10.44e-3), "10.4 ms");
        assert_eq!(seconds(2.0), "2.00 s");
    }

    #[test]
    fn json_lines_are_one_object_per_line() {
        let r = Record {
            suite: "conversions",
            kernel: "f32->f16 rn",
            elements: 4096,
            seconds: 1e-6,
            gbps: 24.576,
            reference: "memcpy",
            ratio: 0.5,
            reference_seconds: 0.5e-6,
            reference_gbps: 65.536,
        };
        let mut sink = JsonLines(Vec::new());
        sink.record(&r).unwrap();
        sink.record(&r).unwrap();
        let text = String::from_utf8(sink.0).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["kernel"], "f32->f16 rn");
        assert_eq!(v["elements"], 4096);
        assert_eq!(v["ratio"], 0.5);
    }
}
