//! `/metrics` of the daemons: a `prometheus-client` registry served in the Prometheus text
//! format 0.0.4, which every Prometheus version and `promtool check metrics` read.
//!
//! `prometheus-client` writes OpenMetrics, whose counter families are named without their
//! `_total` suffix and which ends with `# EOF`; [`render`] renames the counters' `HELP` and
//! `TYPE` lines to their samples' name and drops the end marker. Sample lines are unchanged.

use prometheus_client::registry::Registry;

/// The `Content-Type` of [`render`]'s text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The registry's metrics in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut open_metrics = String::new();
    if let Err(error) = prometheus_client::encoding::text::encode(&mut open_metrics, registry) {
        tracing::warn!(%error, "cannot encode metrics");
    }
    to_prometheus_text(&open_metrics)
}

/// OpenMetrics text (as `prometheus-client` writes it) to the Prometheus text format.
pub fn to_prometheus_text(open_metrics: &str) -> String {
    let counters: Vec<&str> = open_metrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len() + 16 * counters.len());
    for line in open_metrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(&name)
                .then(|| format!("{prefix}{name}_total {tail}"))
        });
        match renamed {
            Some(renamed) => out.push_str(&renamed),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Escapes a label value for the text format (`prometheus-client` writes values verbatim).
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;

    #[test]
    fn counters_are_renamed_and_eof_dropped() {
        let mut registry = Registry::default();
        let requests = Family::<Vec<(String, String)>, Counter>::default();
        registry.register("x_requests", "Requests", requests.clone());
        let gauge = Gauge::<i64>::default();
        registry.register("x_total_things", "Things", gauge.clone());
        requests
            .get_or_create(&vec![("code".to_owned(), escape_label("a\"b\\c\nd"))])
            .inc();
        gauge.set(3);
        assert_eq!(
            render(&registry),
            "# HELP x_requests_total Requests.\n\
             # TYPE x_requests_total counter\n\
             x_requests_total{code=\"a\\\"b\\\\c\\nd\"} 1\n\
             # HELP x_total_things Things.\n\
             # TYPE x_total_things gauge\n\
             x_total_things 3\n"
        );
        assert_eq!(to_prometheus_text(""), "");
    }
}
