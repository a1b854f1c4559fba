//! Where in a TOML file of `[[layer]]` tables a parse error is: its line,
//! the layer (its position and its label key's value) and the key. Shared
//! by the planner's cost tables ([`crate::plan::ModelTable`]) and the
//! trainer's network files ([`crate::model::NetworkFile`]), so both name
//! an error's place the same way.

use core::fmt;

/// Which layer an error is about: its position (from 0) and, if it has
/// one, its name (a cost table's `name`, a network file's `kind`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LayerRef {
    /// Position in the table, from 0.
    pub index: usize,
    /// Its name, if known.
    pub name: Option<String>,
}

impl fmt::Display for LayerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "layer {} (`{name}`)", self.index),
            None => write!(f, "layer {}", self.index),
        }
    }
}

/// The line (from 1) of byte `at` of `text`.
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// The place of `error` in `text`: the line (from 1) and the
/// `[[layer]]` it is in, labelled by the value of its `label` key.
pub(crate) fn place(
    text: &str,
    error: &toml::de::Error,
    label: &str,
) -> (Option<usize>, Option<LayerRef>) {
    let start = error.span().map(|s| s.start.min(text.len()));
    (
        start.map(|s| line_of(text, s)),
        start.and_then(|s| layer_at(text, s, label)),
    )
}

/// The key whose value `error`'s span starts at (`stride` of
/// `stride = -1` or of `{ kind = "conv", stride = -1 }`), if the error's
/// span is a key's value (not a table header).
pub(crate) fn key_at(text: &str, error: &toml::de::Error) -> Option<String> {
    let at = error.span()?.start.min(text.len());
    let before = text[..at].trim_end().strip_suffix('=')?.trim_end();
    let key: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    (!key.is_empty()).then_some(key)
}

/// The `[[layer]]` table that byte `at` of `text` is in, with the value
/// of its `label` key if its `label = "..."` line parses.
pub(crate) fn layer_at(text: &str, at: usize, label: &str) -> Option<LayerRef> {
    let mut index = None;
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if offset > at {
            break;
        }
        let header = line.trim();
        if is_table_header(header) {
            let is_layer = header
                .strip_prefix("[[")
                .and_then(|h| h.split("]]").next())
                .is_some_and(|h| h.trim() == "layer");
            index = if is_layer {
                Some(index.map_or(0, |i: usize| i + 1))
            } else {
                None
            };
            start = offset;
        }
        offset += line.len();
    }
    let index = index?;
    let name = text[start..]
        .lines()
        .skip(1)
        .take_while(|l| !is_table_header(l.trim()))
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == label).then(|| string_value(value))
        });
    Some(LayerRef { index, name })
}

/// Whether `line` (trimmed) is a table header, `[[layer]]` or `[name]`,
/// not a line of a multi-line array that starts with one of its elements
/// (`[{ kind = "conv" }],`, `[1, 2],`).
fn is_table_header(line: &str) -> bool {
    let line = line.split('#').next().unwrap_or_default().trim_end();
    let Some(inner) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) else {
        return false;
    };
    let inner = inner
        .strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or(inner);
    !inner.trim().is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-. \"'".contains(c))
}

/// The value of `= "x"  # comment`: `x`.
fn string_value(value: &str) -> String {
    let value = value.trim();
    match value.strip_prefix('"') {
        Some(quoted) => quoted.split('"').next().unwrap_or_default().to_owned(),
        None => value
            .split('#')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}

/// `text` on one line: its lines trimmed and joined.
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_arrays_that_open_with_a_bracket_are_not_headers() {
        let text = "[[layer]]\nkind = \"branches\"\nbranches = [\n  [{ kind = \"bn_act\" }],\n  \
                    [1, 2], # a comment\n]\n[[ layer ]] # the second\nkind = \"conv\"\n[meta]\n";
        let at = |needle: &str| layer_at(text, text.find(needle).unwrap(), "kind");
        let layer = |index, name: &str| {
            Some(LayerRef {
                index,
                name: Some(name.to_owned()),
            })
        };
        assert_eq!(at("[{"), layer(0, "branches"));
        assert_eq!(at("[1, 2]"), layer(0, "branches"));
        assert_eq!(at("= \"conv\""), layer(1, "conv"));
        assert_eq!(at("[meta]"), None);
    }
}
