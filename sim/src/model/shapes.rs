//! The shapes of the feature-map layers: a convolution's and a
//! pooling's hyperparameters, and what they make of an input (PyTorch's
//! `conv2d`, `max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d(1)`).

/// A convolution's hyperparameters (PyTorch's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    /// Input channels.
    pub in_channels: usize,
    /// Output channels.
    pub out_channels: usize,
    /// Kernel height and width.
    pub kernel: (usize, usize),
    /// Stride (both dimensions).
    pub stride: usize,
    /// Zero padding on every side.
    pub padding: usize,
}

/// A convolution on a batch: its sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvShape {
    /// The convolution.
    pub conv: Conv2d,
    /// Samples.
    pub n: usize,
    /// Input height and width.
    pub input: (usize, usize),
    /// Output height and width.
    pub output: (usize, usize),
}

impl Conv2d {
    /// The shape on `n` samples of `input` (height, width): `None` if the
    /// kernel does not fit the padded input or a size is zero.
    ///
    /// ```
    /// use tessera_sim::model::Conv2d;
    ///
    /// let conv = Conv2d { in_channels: 3, out_channels: 8, kernel: (3, 3), stride: 2, padding: 1 };
    /// assert_eq!(conv.on(2, (8, 8)).unwrap().output, (4, 4));
    /// let big = Conv2d { kernel: (5, 5), padding: 0, ..conv };
    /// assert_eq!(big.on(2, (4, 4)), None); // the kernel does not fit
    /// ```
    #[must_use]
    pub fn on(&self, n: usize, input: (usize, usize)) -> Option<ConvShape> {
        let (kh, kw) = self.kernel;
        let out = |size: usize, k: usize| {
            let padded = size + 2 * self.padding;
            (k > 0 && padded >= k && self.stride > 0).then(|| (padded - k) / self.stride + 1)
        };
        let output = (out(input.0, kh)?, out(input.1, kw)?);
        let sizes = [n, input.0, input.1, self.in_channels, self.out_channels];
        sizes.iter().all(|&s| s > 0).then_some(ConvShape {
            conv: *self,
            n,
            input,
            output,
        })
    }
}

impl ConvShape {
    /// Rows of the input matrix (pixels).
    ///
    /// ```
    /// use tessera_sim::model::Conv2d;
    ///
    /// let conv = Conv2d { in_channels: 3, out_channels: 8, kernel: (3, 3), stride: 2, padding: 1 };
    /// assert_eq!(conv.on(2, (8, 8)).unwrap().in_rows(), 2 * 8 * 8);
    /// ```
    #[must_use]
    pub const fn in_rows(&self) -> usize {
        self.n * self.input.0 * self.input.1
    }

    /// Rows of the output matrix.
    ///
    /// ```
    /// use tessera_sim::model::Conv2d;
    ///
    /// let conv = Conv2d { in_channels: 3, out_channels: 8, kernel: (3, 3), stride: 2, padding: 1 };
    /// assert_eq!(conv.on(2, (8, 8)).unwrap().out_rows(), 2 * 4 * 4);
    /// ```
    #[must_use]
    pub const fn out_rows(&self) -> usize {
        self.n * self.output.0 * self.output.1
    }

    /// Columns of `cols` (the reduction of the product).
    ///
    /// ```
    /// use tessera_sim::model::Conv2d;
    ///
    /// let conv = Conv2d { in_channels: 3, out_channels: 8, kernel: (3, 3), stride: 1, padding: 1 };
    /// assert_eq!(conv.on(1, (8, 8)).unwrap().patch(), 3 * 3 * 3);
    /// ```
    #[must_use]
    pub const fn patch(&self) -> usize {
        self.conv.kernel.0 * self.conv.kernel.1 * self.conv.in_channels
    }

    /// The input pixel (row) tap `(i, j)` of output row `r` reads, if not
    /// padding.
    pub(super) fn tap(&self, r: usize, (i, j): (usize, usize)) -> Option<usize> {
        let (oh, ow) = self.output;
        let (n, y, x) = (r / (oh * ow), r / ow % oh, r % ow);
        let s = self.conv.stride;
        let ih = (y * s + i).checked_sub(self.conv.padding)?;
        let iw = (x * s + j).checked_sub(self.conv.padding)?;
        (ih < self.input.0 && iw < self.input.1)
            .then(|| (n * self.input.0 + ih) * self.input.1 + iw)
    }

    /// The output rows and columns of `cols` that input row `r` feeds, in
    /// increasing tap order: `(output row, tap index i kw + j)`.
    pub(super) fn taps_of(&self, r: usize) -> Vec<(usize, usize)> {
        let (h, w) = self.input;
        let (n, ih, iw) = (r / (h * w), r / w % h, r % w);
        let (kh, kw) = self.conv.kernel;
        let mut out = Vec::new();
        // Only the taps that reach an output: a window of 200,000 taps fed
        // by each of 200,000 inputs took a minute when every tap was tried.
        for (i, y) in self.feeding(ih, kh, self.output.0) {
            for (j, x) in self.feeding(iw, kw, self.output.1) {
                out.push(((n * self.output.0 + y) * self.output.1 + x, i * kw + j));
            }
        }
        out
    }

    /// The taps `i < k` (increasing) through which input coordinate `pos`
    /// reaches an output coordinate `o < out`, with `o`: those with
    /// `pos + padding = o stride + i`.
    fn feeding(&self, pos: usize, k: usize, out: usize) -> impl Iterator<Item = (usize, usize)> {
        let (s, at) = (self.conv.stride, pos + self.conv.padding);
        // `o < out` needs `i > at - s out`; `i` and `at` agree modulo `s`.
        let low = (at + 1).saturating_sub(s * out);
        let first = low + (s - low % s + at % s) % s;
        (first..k.min(at + 1))
            .step_by(s)
            .map(move |i| (i, (at - i) / s))
    }
}

/// Which pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// The window's maximum.
    Max,
    /// The window's mean, padding counted (PyTorch's default).
    Avg,
}

/// A pooling layer (PyTorch's names); global average pooling is
/// [`Pool2d::global`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool2d {
    /// Max or average.
    pub kind: PoolKind,
    /// Window height and width.
    pub kernel: (usize, usize),
    /// Stride (both dimensions).
    pub stride: usize,
    /// Padding on every side (at most half the window, as PyTorch
    /// requires).
    pub padding: usize,
}

impl Pool2d {
    /// Average pooling over the whole of an `h x w` map: one value per
    /// channel.
    ///
    /// ```
    /// use tessera_sim::model::Pool2d;
    ///
    /// let pool = Pool2d::global((4, 6));
    /// assert_eq!(pool.on(2, 5, (4, 6)).unwrap().output, (1, 1)); // one value per channel
    /// ```
    #[must_use]
    pub const fn global(input: (usize, usize)) -> Self {
        Self {
            kind: PoolKind::Avg,
            kernel: input,
            stride: 1,
            padding: 0,
        }
    }

    /// The shape on `n` samples of `c` channels of `input`, if the window
    /// fits and the padding is at most half of it.
    ///
    /// ```
    /// use tessera_sim::model::{Pool2d, PoolKind};
    ///
    /// let pool = Pool2d { kind: PoolKind::Max, kernel: (2, 2), stride: 2, padding: 0 };
    /// assert_eq!(pool.on(1, 4, (8, 8)).unwrap().output, (4, 4));
    /// assert_eq!(Pool2d { padding: 2, ..pool }.on(1, 4, (8, 8)), None); // more than half the window
    /// ```
    #[must_use]
    pub fn on(&self, n: usize, c: usize, input: (usize, usize)) -> Option<ConvShape> {
        let half = self.kernel.0.min(self.kernel.1) / 2;
        if self.padding > half {
            return None;
        }
        Conv2d {
            in_channels: c,
            out_channels: c,
            kernel: self.kernel,
            stride: self.stride,
            padding: self.padding,
        }
        .on(n, input)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Conv2d;

    /// Every tap tried, as the definition reads.
    fn taps_by_definition(shape: &super::ConvShape, r: usize) -> Vec<(usize, usize)> {
        let (h, w) = shape.input;
        let (n, ih, iw) = (r / (h * w), r / w % h, r % w);
        let (kh, kw) = shape.conv.kernel;
        let (s, p) = (shape.conv.stride, shape.conv.padding);
        let mut out = Vec::new();
        for i in 0..kh {
            for j in 0..kw {
                let (Some(y), Some(x)) = ((ih + p).checked_sub(i), (iw + p).checked_sub(j)) else {
                    continue;
                };
                if y % s == 0 && x % s == 0 && y / s < shape.output.0 && x / s < shape.output.1 {
                    out.push((
                        (n * shape.output.0 + y / s) * shape.output.1 + x / s,
                        i * kw + j,
                    ));
                }
            }
        }
        out
    }

    #[test]
    fn taps_of_are_the_definitions_taps() {
        let mut shapes = 0;
        for (kh, kw) in [(1, 1), (1, 3), (2, 2), (3, 3), (5, 2), (7, 7)] {
            for stride in 1..=4 {
                for padding in 0..=3 {
                    for input in [(1, 1), (3, 5), (8, 8), (9, 4)] {
                        let conv = Conv2d {
                            in_channels: 1,
                            out_channels: 1,
                            kernel: (kh, kw),
                            stride,
                            padding,
                        };
                        let Some(shape) = conv.on(2, input) else {
                            continue;
                        };
                        shapes += 1;
                        for r in 0..shape.in_rows() {
                            assert_eq!(
                                shape.taps_of(r),
                                taps_by_definition(&shape, r),
                                "{conv:?} {input:?} row {r}"
                            );
                        }
                    }
                }
            }
        }
        assert!(shapes > 200, "{shapes} shapes");
    }
}
