//! The two text formats `/metrics` serves, chosen by the scraper's `Accept`
//! header: OpenMetrics 1.0 (what Prometheus asks for first) and the classic
//! Prometheus text format 0.0.4 (what `curl`, `promtool check metrics` and
//! older scrapers read). Pure: the registry is encoded once as OpenMetrics,
//! and the 0.0.4 text is derived from it line by line.
//!
//! The formats differ only where this module converts: a counter's family is
//! named without `_total` in OpenMetrics and with it in 0.0.4 (`# HELP` and
//! `# TYPE` must name the samples' name there); `# UNIT` and `# EOF` exist in
//! OpenMetrics alone; `unknown` is 0.0.4's `untyped`, `info` and `stateset`
//! are gauges; exemplars (after ` # ` on a sample line) and `_created`
//! samples are OpenMetrics only; and OpenMetrics escapes `"` in help text.

/// A text exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
    /// `text/plain; version=0.0.4`.
    Text,
}

impl Format {
    /// The `Content-Type` of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when it names it
    /// with a quality at least that of any text type it accepts (`text/plain`,
    /// `text/*`, `*/*`); the 0.0.4 text otherwise, and when there is no
    /// header (as Prometheus does without OpenMetrics).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let mut openmetrics: f32 = 0.0;
        let mut text: f32 = 0.0;
        for range in accept.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .map_or(Some(1.0), |(_, v)| v.trim().parse::<f32>().ok())
                .filter(|q| q.is_finite())
                .unwrap_or(0.0);
            match media.as_str() {
                "application/openmetrics-text" => openmetrics = openmetrics.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }
}

/// The 0.0.4 text of an OpenMetrics exposition (as prometheus-client writes
/// it: `# HELP`, `# TYPE` and `# UNIT` before each family's samples).
pub fn text_from_openmetrics(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len() + openmetrics.len() / 16);
    // The current family, when it is a counter: its samples keep their names,
    // and only the `_total` one is a 0.0.4 sample.
    let mut counter: Option<String> = None;
    // A HELP line waits for its family's TYPE, which may rename the family;
    // (name, help text) until then.
    let mut help: Option<(String, String)> = None;
    let write_help = |out: &mut String, name: &str, text: &str| {
        out.push_str("# HELP ");
        out.push_str(name);
        out.push(' ');
        out.push_str(text);
        out.push('\n');
    };
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let (keyword, rest) = rest.split_once(' ').unwrap_or((rest, ""));
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            match keyword {
                "EOF" | "UNIT" => {}
                "HELP" => {
                    if let Some((n, t)) = help.take() {
                        write_help(&mut out, &n, &t);
                    }
                    help = Some((name.to_string(), help_text(tail)));
                }
                "TYPE" => {
                    let (kind, renamed) = match tail {
                        "counter" => ("counter", format!("{name}_total")),
                        "unknown" => ("untyped", name.to_string()),
                        "info" => ("gauge", format!("{name}_info")),
                        "stateset" | "gaugehistogram" => ("gauge", name.to_string()),
                        other => (other, name.to_string()),
                    };
                    counter = (kind == "counter").then(|| name.to_string());
                    if let Some((n, t)) = help.take() {
                        write_help(&mut out, if n == name { &renamed } else { &n }, &t);
                    }
                    out.push_str("# TYPE ");
                    out.push_str(&renamed);
                    out.push(' ');
                    out.push_str(kind);
                    out.push('\n');
                }
                _ => {}
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        // A HELP whose TYPE never came keeps its name.
        if let Some((n, t)) = help.take() {
            write_help(&mut out, &n, &t);
        }
        let sample = without_exemplar(line);
        let name = sample.split(['{', ' ']).next().unwrap_or("");
        if let Some(family) = &counter
            && name.strip_prefix(family.as_str()) == Some("_created")
        {
            continue;
        }
        out.push_str(sample);
        out.push('\n');
    }
    if let Some((n, t)) = help.take() {
        write_help(&mut out, &n, &t);
    }
    out
}

/// A sample line without its exemplar, which follows ` # ` after the
/// labels (a label value may hold ` # ` itself, inside its quotes).
fn without_exemplar(line: &str) -> &str {
    let mut labels_end = 0;
    if let Some(open) = line.find(['{', ' '])
        && line[open..].starts_with('{')
    {
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in line[open..].char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                '}' if !quoted => {
                    labels_end = open + i;
                    break;
                }
                _ => {}
            }
        }
    }
    match line[labels_end..].find(" # ") {
        Some(at) => &line[..labels_end + at],
        None => line,
    }
}

/// OpenMetrics help text (escapes `\\`, `\n`, `\"`) as 0.0.4 help text
/// (escapes `\\` and `\n` only).
fn help_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut chars = openmetrics.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push_str("\\\\"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_curl_gets_text() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
        let old_prometheus = "text/plain;version=0.0.4;q=1,*/*;q=0.1";
        assert_eq!(Format::negotiate(Some(old_prometheus)), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(Format::negotiate(None), Format::Text);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text")),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0.2, text/plain")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0, */*")),
            Format::Text,
            "q=0 refuses"
        );
        assert_eq!(
            Format::negotiate(Some(
                "Application/OpenMetrics-Text; Q=0.9, text/plain; q=0.8"
            )),
            Format::OpenMetrics,
            "media types and parameter names are case-insensitive"
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=nonsense, text/plain")),
            Format::Text,
            "an unreadable quality counts as 0"
        );
    }

    #[test]
    fn counters_are_named_with_total_and_openmetrics_lines_go() {
        let om = "\
# HELP requests Requests \\\"served\\\" \\\\ all.
# TYPE requests counter
requests_total{code=\"200\"} 3
requests_created{code=\"200\"} 1.7e9
# HELP latency_seconds Latency.
# TYPE latency_seconds histogram
# UNIT latency_seconds seconds
latency_seconds_bucket{le=\"0.1\"} 1 # {trace_id=\"ab\"} 0.05 1.7e9
latency_seconds_bucket{le=\"+Inf\"} 1
latency_seconds_sum 0.05
latency_seconds_count 1
# HELP up Up.
# TYPE up gauge
up 1
# HELP odd Odd.
# TYPE odd unknown
odd 2
# EOF
";
        let text = text_from_openmetrics(om);
        assert_eq!(
            text,
            "\
# HELP requests_total Requests \"served\" \\\\ all.
# TYPE requests_total counter
requests_total{code=\"200\"} 3
# HELP latency_seconds Latency.
# TYPE latency_seconds histogram
latency_seconds_bucket{le=\"0.1\"} 1
latency_seconds_bucket{le=\"+Inf\"} 1
latency_seconds_sum 0.05
latency_seconds_count 1
# HELP up Up.
# TYPE up gauge
up 1
# HELP odd Odd.
# TYPE odd untyped
odd 2
"
        );
    }

    #[test]
    fn a_label_value_holding_a_hash_is_kept() {
        let om = "# HELP g G.\n# TYPE g gauge\ng{path=\"a # b \\\" # }\"} 1 # {x=\"}\"} 1\n# EOF\n";
        assert_eq!(
            text_from_openmetrics(om),
            "# HELP g G.\n# TYPE g gauge\ng{path=\"a # b \\\" # }\"} 1\n"
        );
    }
}
