//! The value parsers the subcommands' flags share.

/// A whole-number type a [`whole`] value parser can produce.
pub(super) trait Whole: TryFrom<u64> + Clone + Send + Sync + 'static {
    /// The largest value.
    const MAX: u64;
}

impl Whole for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl Whole for u64 {
    const MAX: u64 = u64::MAX;
}

impl Whole for usize {
    const MAX: u64 = usize::MAX as u64;
}

/// The value parser of a count, a width or a seed: a whole number of at
/// least `MIN` that fits `T`. Its message says what is allowed, as clap
/// shows it: `invalid value '-1' for '--epochs <N>': expected a whole
/// number >= 1`.
pub(super) fn whole<T: Whole, const MIN: u64>(s: &str) -> Result<T, String> {
    let range = if T::MAX == u64::MAX {
        format!("expected a whole number >= {MIN}")
    } else {
        format!("expected a whole number from {MIN} to {}", T::MAX)
    };
    let t = s.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(range);
    }
    match digits.parse::<u64>() {
        Ok(n) if n >= MIN => {
            T::try_from(n).map_err(|_| format!("expected a whole number from {MIN} to {}", T::MAX))
        }
        Ok(_) => Err(range),
        Err(_) => Err(format!("expected a whole number from {MIN} to {}", T::MAX)),
    }
}

/// Layer widths as `--hidden` takes them: whole numbers >= 1 separated by
/// commas, or nothing (`--hidden ''`) for no hidden layer, as `hidden = []`
/// in a config file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(super) struct Widths(pub(super) Vec<usize>);

/// The value parser of [`Widths`]: `invalid value '8,-3' for '--hidden
/// <W,W>': '-3': expected a whole number >= 1 (widths separated by commas,
/// or '' for none)`.
pub(super) fn widths(s: &str) -> Result<Widths, String> {
    if s.trim().is_empty() {
        return Ok(Widths(Vec::new()));
    }
    let width = |w: &str| {
        whole::<usize, 1>(w)
            .map_err(|e| format!("'{w}': {e} (widths separated by commas, or '' for none)"))
    };
    s.split(',')
        .map(width)
        .collect::<Result<_, _>>()
        .map(Widths)
}
