//! Which parameters Graphcore's and timm's recipes exclude from weight
//! decay and trust-ratio adaptation, judged by name (for parameters that
//! come by name, as from a checkpoint; the trainer's own models know each
//! parameter's kind).

/// Whether a parameter is a bias or a normalisation parameter by its name:
/// names ending in `bias`, `beta` or `gamma`, or containing `norm`, `bn` or
/// `ln` as a path component. Give such parameters a config made with
/// [`OptimizerConfig::excluded`](tessera_core::optim::OptimizerConfig::excluded).
///
/// ```
/// use tessera_sim::train::is_bias_or_norm;
///
/// assert!(is_bias_or_norm("blocks.0.norm1.weight"));
/// assert!(is_bias_or_norm("fc1.bias") && is_bias_or_norm("bn1.gamma"));
/// assert!(!is_bias_or_norm("fc1.weight"));
/// ```
#[must_use]
pub fn is_bias_or_norm(name: &str) -> bool {
    let last = name.rsplit(['.', '/']).next().unwrap_or(name);
    let ends = ["bias", "beta", "gamma"].iter().any(|s| last.ends_with(s));
    let component = name.split(['.', '/', '_']).any(|c| {
        c.contains("norm")
            || c == "bn"
            || c == "ln"
            || c.starts_with("bn") && c[2..].bytes().all(|b| b.is_ascii_digit())
    });
    ends || component
}

#[cfg(test)]
mod tests {
    use super::is_bias_or_norm;

    #[test]
    fn biases_and_norms_by_name() {
        for name in [
            "encoder.layer.0.attention.output.dense.bias",
            "bn1.weight",
            "layer_norm.gamma",
            "LayerNorm.beta",
            "ln_f.weight",
        ] {
            assert!(is_bias_or_norm(name), "{name}");
        }
        for name in [
            "conv1.weight",
            "fc.weight",
            "embeddings.word_embeddings.weight",
        ] {
            assert!(!is_bias_or_norm(name), "{name}");
        }
    }
}
