//! The built-in models, computed from their published architectures (the
//! shapes of every convolution, attention and feed-forward product), not
//! from typed-in totals: ResNet-50 v1.5 at 224 x 224 and BERT-Large
//! pre-training at sequence length 128 and 384.
//!
//! | model | rows | parameters | forward FLOPs per sample |
//! |---|---|---|---|
//! | [`resnet50`] | a row per convolution (with its batch norm and ReLU), the max and average pools, the classifier | 25,557,032 (torchvision's count) | 8.2 G (4.1 GMACs) |
//! | [`bert_large`] | the embeddings; per encoder layer the QKV projection, the attention (scores, softmax, context), its output projection (with residual and layer norm), the FFN's two products; the pre-training heads | 336.2 M: BERT's 335.1 M plus the MLM transform, the decoder bias and the NSP classifier (the decoder's weights are the word embeddings, tied) | 80.2 G at 128 tokens |
//!
//! Activation bytes (16-bit) are what each row's backward pass needs kept:
//! a convolution's output (for its batch norm) and the normalised,
//! rectified output (for the ReLU and the next product); the block's last
//! convolution also keeps the block's output after the residual ReLU; the
//! attention keeps Q, K, V, the softmax probabilities and the context; the
//! FFN its pre- and post-GELU values; layer norms their input and output.
//! Dropout masks are not stored (Graphcore's BERT regenerates them from
//! the seed).

use super::table::{Gemm, Layer, ModelTable, ModelTableError, SimLayer, Tied};

/// A built-in model, by its command-line name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `resnet50`: [`resnet50`].
    Resnet50,
    /// `bert-large-128`: [`bert_large`] at 128 tokens, 20 masked.
    BertLarge128,
    /// `bert-large-384`: [`bert_large`] at 384 tokens, 56 masked.
    BertLarge384,
}

impl Builtin {
    /// Every built-in model.
    pub const ALL: [Self; 3] = [Self::Resnet50, Self::BertLarge128, Self::BertLarge384];

    /// The command-line name.
    ///
    /// ```
    /// use tessera_sim::plan::Builtin;
    ///
    /// assert_eq!(Builtin::BertLarge128.name(), "bert-large-128");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Resnet50 => "resnet50",
            Self::BertLarge128 => "bert-large-128",
            Self::BertLarge384 => "bert-large-384",
        }
    }

    /// The model named `name`, if it is one of [`Builtin::ALL`].
    ///
    /// ```
    /// use tessera_sim::plan::Builtin;
    ///
    /// assert_eq!(Builtin::named("resnet50"), Some(Builtin::Resnet50));
    /// assert_eq!(Builtin::named("resnet"), None);
    /// for b in Builtin::ALL {
    ///     assert_eq!(Builtin::named(b.name()), Some(b));
    /// }
    /// ```
    #[must_use]
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Its table.
    ///
    /// ```
    /// use tessera_sim::plan::{Builtin, bert_large};
    ///
    /// let t = Builtin::BertLarge384.table();
    /// assert_eq!(t, bert_large(384, 56).unwrap());
    /// // The sequence length changes the FLOPs, not the parameters.
    /// assert_eq!(t.params(), Builtin::BertLarge128.table().params());
    /// ```
    #[must_use]
    pub fn table(self) -> ModelTable {
        match self {
            Self::Resnet50 => resnet50(),
            Self::BertLarge128 => bert_table(128, 20),
            Self::BertLarge384 => bert_table(384, 56),
        }
    }
}

/// Bytes of a 16-bit element.
const HALF: u64 = 2;

/// One convolution (no bias) with its batch norm and ReLU, as a row.
struct Conv {
    name: String,
    cin: u64,
    cout: u64,
    kernel: u64,
    /// Output height and width.
    out: u64,
    /// Stride (the padding keeps the output at the input over the stride).
    stride: u64,
    /// Whether the row computes its input's gradient (not the first).
    input_grad: bool,
    /// 16-bit tensors of the output's size the row keeps.
    kept: u64,
}

impl Conv {
    fn layer(&self) -> Layer {
        let positions = self.out * self.out;
        let k = self.cin * self.kernel * self.kernel;
        let gemm = Gemm {
            m: positions,
            k,
            n: self.cout,
        };
        let f = gemm.flops();
        Layer {
            name: self.name.clone(),
            // Weights, and batch norm's gamma and beta.
            params: k * self.cout + 2 * self.cout,
            flops_forward: f,
            flops_backward: if self.input_grad { 2 * f } else { f },
            activation_bytes: self.kept * positions * self.cout * HALF,
            output_bytes: None,
            gemm: Some(gemm),
            tied: None,
            sim: Some(self.sim()),
        }
    }

    /// The row as the simulator builds it: the convolution with its batch
    /// norm and ReLU (the residual add of a block's last row is not
    /// described).
    fn sim(&self) -> SimLayer {
        let size = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
        let (k, input) = (size(self.kernel), size(self.out * self.stride));
        SimLayer::Conv2d {
            in_channels: size(self.cin),
            out_channels: size(self.cout),
            kernel: [k, k],
            stride: size(self.stride),
            padding: k / 2,
            input: [input, input],
            batch_norm: true,
            residual: false,
            input_grad: self.input_grad,
        }
    }
}

/// ResNet-50 v1.5 (torchvision's `resnet50`, He et al. 2016 with the
/// stride of each downsampling bottleneck on its 3 x 3 convolution) for
/// 224 x 224 RGB images and 1,000 classes. The host sends 8-bit pixels
/// (Graphcore's CNN examples' eight-bit IO) and a 4-byte label.
///
/// ```
/// use tessera_sim::plan::resnet50;
///
/// let t = resnet50();
/// // torchvision's count, exactly; 53 convolutions, 2 pools, the classifier.
/// assert_eq!(t.params(), 25_557_032);
/// assert_eq!(t.layers().len(), 56);
/// ```
#[must_use]
pub fn resnet50() -> ModelTable {
    let mut layers = Vec::new();
    layers.push(
        Conv {
            name: "conv1".into(),
            cin: 3,
            cout: 64,
            kernel: 7,
            out: 112,
            stride: 2,
            input_grad: false,
            kept: 2,
        }
        .layer(),
    );
    layers.push(maxpool());
    let mut cin = 64;
    let mut size = 56;
    for (stage, (width, blocks, stride)) in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]
        .into_iter()
        .enumerate()
    {
        let cout = 4 * width;
        for block in 0..blocks {
            let s = if block == 0 { stride } else { 1 };
            let out = size / s;
            let name = |conv: &str| format!("layer{}.{block}.{conv}", stage + 1);
            if block == 0 {
                layers.push(
                    Conv {
                        name: name("downsample"),
                        cin,
                        cout,
                        kernel: 1,
                        out,
                        stride: s,
                        input_grad: true,
                        kept: 2,
                    }
                    .layer(),
                );
            }
            for (conv, c_in, c_out, kernel, (o, st), kept) in [
                ("conv1", cin, width, 1, (size, 1), 2),
                ("conv2", width, width, 3, (out, s), 2),
                ("conv3", width, cout, 1, (out, 1), 3),
            ] {
                layers.push(
                    Conv {
                        name: name(conv),
                        cin: c_in,
                        cout: c_out,
                        kernel,
                        out: o,
                        stride: st,
                        input_grad: true,
                        kept,
                    }
                    .layer(),
                );
            }
            cin = cout;
            size = out;
        }
    }
    layers.extend(head());
    ModelTable::trusted("ResNet-50 v1.5 (224x224)".into(), 224 * 224 * 3 + 4, layers)
}

/// ResNet-50's 3 x 3 max pool after its first convolution.
fn maxpool() -> Layer {
    // 3 x 3 max pool, stride 2: nine comparisons per output; its output
    // (the argmax follows from it and the input) is kept.
    let pooled = 56 * 56 * 64;
    Layer {
        name: "maxpool".into(),
        params: 0,
        flops_forward: 9 * pooled,
        flops_backward: pooled,
        activation_bytes: pooled * HALF,
        output_bytes: None,
        gemm: None,
        tied: None,
        sim: Some(SimLayer::Pool2d {
            max: true,
            channels: 64,
            kernel: [3, 3],
            stride: 2,
            padding: 1,
            input: [112, 112],
        }),
    }
}

/// ResNet-50's global average pool and classifier.
fn head() -> [Layer; 2] {
    // Global average pool: 49 additions per channel.
    let avgpool = Layer {
        name: "avgpool".into(),
        params: 0,
        flops_forward: 49 * 2048,
        flops_backward: 49 * 2048,
        activation_bytes: 2048 * HALF,
        output_bytes: None,
        gemm: None,
        tied: None,
        sim: Some(SimLayer::Pool2d {
            max: false,
            channels: 2048,
            kernel: [7, 7],
            stride: 1,
            padding: 0,
            input: [7, 7],
        }),
    };
    let product = Gemm {
        m: 1,
        k: 2048,
        n: 1000,
    };
    let fc = Layer {
        name: "fc".into(),
        params: 2048 * 1000 + 1000,
        flops_forward: product.flops(),
        flops_backward: 2 * product.flops(),
        // The logits and the softmax.
        activation_bytes: 2 * 1000 * HALF,
        output_bytes: None,
        gemm: Some(product),
        tied: None,
        sim: Some(SimLayer::Dense {
            inputs: 2048,
            outputs: 1000,
            input_grad: true,
        }),
    };
    [avgpool, fc]
}

/// BERT-Large: 24 layers, hidden size 1,024, 16 heads, feed-forward size
/// 4,096, WordPiece vocabulary of 30,522, 512 positions, 2 token types.
pub const BERT_LARGE: BertShape = BertShape {
    layers: 24,
    hidden: 1024,
    heads: 16,
    ffn: 4096,
    vocab: 30_522,
    positions: 512,
    token_types: 2,
};

/// The shape of a BERT model (Devlin et al. 2019).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BertShape {
    /// Encoder layers.
    pub layers: u64,
    /// Hidden size.
    pub hidden: u64,
    /// Attention heads.
    pub heads: u64,
    /// Feed-forward (intermediate) size.
    pub ffn: u64,
    /// Vocabulary.
    pub vocab: u64,
    /// Position embeddings.
    pub positions: u64,
    /// Token-type embeddings.
    pub token_types: u64,
}

/// BERT-Large pre-training (masked LM on `masked` tokens and next-sentence
/// prediction) at `seq_len` tokens per sequence. Graphcore's and Google's
/// configurations mask 20 tokens at 128 and 56 at 384 (about 15%). The
/// host sends, per token, the token id, its type and its attention mask
/// (4 bytes each), and per masked token its position and label, and the
/// NSP label.
///
/// # Errors
/// [`ModelTableError::Field`] for a sequence of 0 or more than 512
/// tokens, or more masked tokens than tokens.
///
/// ```
/// use tessera_sim::plan::bert_large;
///
/// let t = bert_large(128, 20).unwrap();
/// // The embeddings, 5 rows per encoder layer, the heads.
/// assert_eq!(t.layers().len(), 1 + 24 * 5 + 1);
/// assert!(bert_large(0, 0).is_err());
/// assert!(bert_large(513, 20).is_err());
/// assert!(bert_large(16, 20).is_err()); // more masked tokens than tokens
/// ```
pub fn bert_large(seq_len: u64, masked: u64) -> Result<ModelTable, ModelTableError> {
    let problem = if seq_len == 0 || seq_len > BERT_LARGE.positions {
        Some(format!(
            "is {seq_len}: BERT-Large takes 1 to {} tokens",
            BERT_LARGE.positions
        ))
    } else if masked > seq_len {
        Some(format!(
            "{masked} masked tokens are more than the {seq_len} tokens"
        ))
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(ModelTableError::Field {
            origin: "bert-large".into(),
            layer: super::table::LayerRef {
                index: 0,
                name: Some("embeddings".into()),
            },
            field: "seq_len",
            problem,
        });
    }
    let t = bert_table(seq_len, masked);
    ModelTable::new(t.name().to_owned(), t.input_bytes(), t.layers().to_vec())
}

/// A layer of the BERT table: `flops` forward and backward per sample,
/// neither tied nor calibrated.
fn bert_layer(
    name: String,
    params: u64,
    flops: (u64, u64),
    activation_bytes: u64,
    output_bytes: Option<u64>,
    gemm: Option<Gemm>,
) -> Layer {
    Layer {
        name,
        params,
        flops_forward: flops.0,
        flops_backward: flops.1,
        activation_bytes,
        output_bytes,
        gemm,
        tied: None,
        sim: None,
    }
}

/// A linear layer of `gemm`: `params`, the backward pass twice the
/// forward (weight and input gradients), `activation_bytes` kept.
fn linear_layer(name: String, params: u64, gemm: Gemm, activation_bytes: u64) -> Layer {
    let flops = gemm.flops();
    bert_layer(
        name,
        params,
        (flops, 2 * flops),
        activation_bytes,
        None,
        Some(gemm),
    )
}

/// Encoder layer `l`'s five rows at sequence length `s`.
fn encoder_layer(l: u64, s: u64) -> [Layer; 5] {
    let BertShape {
        hidden: h,
        heads,
        ffn,
        ..
    } = BERT_LARGE;
    let name = |part: &str| format!("encoder{l}.{part}");
    let linear = |m: u64, k: u64, n: u64| Gemm { m, k, n };
    // Scores Q K^T and context P V per head: two products of 2 s^2
    // (h / heads) FLOPs per head; the backward pass is twice that (the
    // gradients of both operands of both).
    let scores = Gemm {
        m: heads * s,
        k: h / heads,
        n: s,
    };
    [
        // Keeps Q, K and V.
        linear_layer(
            name("attention.qkv"),
            3 * (h * h + h),
            linear(s, h, 3 * h),
            3 * s * h * HALF,
        ),
        // Keeps the softmax probabilities and the context.
        bert_layer(
            name("attention.scores"),
            0,
            (2 * scores.flops(), 4 * scores.flops()),
            (heads * s * s + s * h) * HALF,
            Some(s * h * HALF),
            Some(scores),
        ),
        // Keeps the layer norm's input and output.
        linear_layer(
            name("attention.output"),
            h * h + h + 2 * h,
            linear(s, h, h),
            2 * s * h * HALF,
        ),
        // Keeps the values before and after GELU.
        linear_layer(
            name("ffn.intermediate"),
            h * ffn + ffn,
            linear(s, h, ffn),
            2 * s * ffn * HALF,
        ),
        linear_layer(
            name("ffn.output"),
            ffn * h + h + 2 * h,
            linear(s, ffn, h),
            2 * s * h * HALF,
        ),
    ]
}

/// The BERT-Large table (valid for `1 <= seq <= 512`, `masked <= seq`).
fn bert_table(seq: u64, masked: u64) -> ModelTable {
    let BertShape {
        layers: depth,
        hidden: h,
        vocab,
        positions,
        token_types,
        ..
    } = BERT_LARGE;
    let s = seq;
    // Word, position and token-type embeddings summed, then a layer norm:
    // lookups, no products. The weight gradient scatters s x h values into
    // the tables; the add and the layer norm are a few operations per value.
    let mut layers = vec![bert_layer(
        "embeddings".into(),
        (vocab + positions + token_types) * h + 2 * h,
        (8 * s * h, 10 * s * h),
        2 * s * h * HALF,
        Some(s * h * HALF),
        None,
    )];
    for l in 0..depth {
        layers.extend(encoder_layer(l, s));
    }
    // The pre-training heads: the pooler (dense + tanh on [CLS]) and the
    // NSP classifier; the MLM transform (dense + GELU + layer norm) and
    // decoder (the word embeddings, tied, and a bias) on the masked
    // tokens. The decoder's product dominates: it is the row's `gemm`.
    let decoder = Gemm {
        m: masked,
        k: h,
        n: vocab,
    };
    let heads_fwd = 2 * h * h + 2 * 2 * h + 2 * masked * h * h + decoder.flops();
    layers.push(Layer {
        tied: Some(Tied {
            layer: "embeddings".into(),
            params: vocab * h,
        }),
        ..bert_layer(
            "heads".into(),
            (h * h + h) + (2 * h + 2) + (h * h + h + 2 * h) + vocab,
            (heads_fwd, 2 * heads_fwd),
            // The transform's values (dense, GELU, layer norm), the
            // logits, the pooled output.
            (3 * masked * h + masked * vocab + h) * HALF,
            Some((masked * vocab + 2) * HALF),
            Some(decoder),
        )
    });
    let input = s * 3 * 4 + masked * 2 * 4 + 4;
    ModelTable::trusted(format!("BERT-Large (seq {seq})"), input, layers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revalidated(t: &ModelTable) -> ModelTable {
        ModelTable::new(t.name(), t.input_bytes(), t.layers().to_vec()).unwrap()
    }

    #[test]
    fn builtins_are_valid_tables() {
        for b in Builtin::ALL {
            let t = b.table();
            assert_eq!(revalidated(&t), t, "{}", b.name());
            assert_eq!(Builtin::named(b.name()), Some(b));
        }
        assert_eq!(Builtin::named("resnet"), None);
        assert_eq!(bert_large(128, 20).unwrap(), Builtin::BertLarge128.table());
        assert!(bert_large(0, 0).is_err());
        assert!(bert_large(513, 20).is_err());
        assert!(bert_large(16, 20).is_err());
    }

    #[test]
    fn resnet50_matches_the_published_counts() {
        let t = resnet50();
        // torchvision's resnet50: 25,557,032 parameters (convolutions,
        // batch norms' gamma and beta, the classifier). Exact: the table is
        // the architecture, so any difference is a wrong shape.
        assert_eq!(t.params(), 25_557_032);
        // 53 convolutions (49 in bottlenecks, 3 downsamples, conv1), 2
        // pools, the classifier.
        assert_eq!(t.layers().len(), 56);
        // 4.1 GMACs forward (torchvision: 4.09 "GFLOPS", counting a
        // multiply-add once); our FLOPs count it twice: 8.18 G. Within 2%:
        // published figures differ in whether they count the pools and the
        // classifier (0.1%).
        let (fwd, bwd) = t.flops_per_sample();
        assert!((fwd as f64 / 8.18e9 - 1.0).abs() < 0.02, "{fwd}");
        // Backward: weight and input gradients, each as much as the
        // forward pass, except conv1's input gradient: just under 2x.
        let ratio = bwd as f64 / fwd as f64;
        assert!(ratio > 1.9 && ratio < 2.0, "{ratio}");
        // Activations per image: of the order of 40 MB (16-bit), the
        // figure behind "ResNet-50 needs recomputation or small batches".
        let act = t.activation_bytes() as f64;
        assert!(act > 30e6 && act < 60e6, "{act}");
    }

    #[test]
    fn bert_large_matches_the_published_counts() {
        let t = Builtin::BertLarge128.table();
        let heads = t.layers().last().unwrap();
        let own_heads = heads.params - 30_522 // decoder bias
            - (1024 * 1024 + 1024 + 2 * 1024) // MLM transform
            - (2 * 1024 + 2); // NSP
        // Hugging Face's BertModel (bert-large-uncased): embeddings,
        // encoder and pooler, 335,141,888 parameters: exact.
        assert_eq!(t.params() - heads.params + own_heads, 335_141_888);
        // With the pre-training heads, 336.2 M: the "340 M" often quoted
        // is a round figure (within 2%).
        assert!((t.params() as f64 / 340e6 - 1.0).abs() < 0.02);
        assert_eq!(t.layers().len(), 1 + 24 * 5 + 1);
        // Forward FLOPs per sequence: 2 x (encoder parameters) x tokens for
        // the linear layers, plus the attention's 4 s^2 h per layer, plus
        // the heads on the 20 masked tokens (2 x 20 x h x vocab). Within 1%:
        // the approximation counts biases and layer norms as products.
        let encoder: u64 = t.layers()[1..121].iter().map(|l| l.params).sum();
        let (s, h) = (128.0, 1024.0);
        let approx = 2.0 * encoder as f64 * s + 24.0 * 4.0 * s * s * h + 2.0 * 20.0 * h * 30_522.0;
        let (fwd, bwd) = t.flops_per_sample();
        assert!(
            (fwd as f64 / approx - 1.0).abs() < 0.01,
            "{fwd} vs {approx}"
        );
        // Backward: twice the forward pass but for the embeddings (a
        // scatter of 10 s h, not 2 x 8 s h).
        assert_eq!(bwd, 2 * fwd - 6 * 128 * 1024);
        // Activations per layer: Korthikanti et al. 2022 count s b h (34 +
        // 5 a s / h) bytes with 16-bit values, of which the dropout masks
        // (2 s b h + a s^2 b bytes) and the attention dropout's output (2 a
        // s^2 b) are not kept here: 32 s h + 2 a s^2 bytes per sequence.
        let per_layer: u64 = t.layers()[1..6].iter().map(|l| l.activation_bytes).sum();
        let reference = 32.0 * s * h + 2.0 * 16.0 * s * s;
        assert!(
            (per_layer as f64 / reference - 1.0).abs() < 0.05,
            "{per_layer}"
        );
        // At 384 tokens the linear layers' FLOPs triple and attention's
        // grow nine-fold.
        let t384 = Builtin::BertLarge384.table();
        assert!(t384.flops_per_sample().0 > 3 * fwd);
        assert_eq!(t384.params(), t.params());
    }
}
