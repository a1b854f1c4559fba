//! conv2d and pooling on tiles (im2col, a tile product, col2im; gathered
//! windows) against an f64
//! oracle whose gradients are checked by finite differences, PyTorch's
//! semantics on hand-computed vectors, and the same bits on every tile
//! count.

use tessera_core::fp::{HalfFloat, f16};
use tessera_sim::kernels::matmul::BlockLayout;
use tessera_sim::model::{
    Conv2d, ConvExtras, ConvShape, ModelError, Pool2d, PoolKind, batch_norm2d_on_tiles,
    conv2d_cycles, conv2d_on_tiles, pool2d_on_tiles, residual_add_on_tiles,
};

use crate::support::{bits, target, uniform};

/// `(y, dx, dw)` of PyTorch's conv2d (NCHW, no bias) in f64.
fn oracle(s: &ConvShape, x: &[f64], w: &[f64], dy: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let c = &s.conv;
    let (ci, co, (kh, kw), st, p) = (c.in_channels, c.out_channels, c.kernel, c.stride, c.padding);
    let ((h, wd), (oh, ow)) = (s.input, s.output);
    let mut y = vec![0.0; s.n * co * oh * ow];
    let mut dx = vec![0.0; x.len()];
    let mut dw = vec![0.0; w.len()];
    for n in 0..s.n {
        for o in 0..co {
            for (yy, xx) in (0..oh).flat_map(|a| (0..ow).map(move |b| (a, b))) {
                let out = ((n * co + o) * oh + yy) * ow + xx;
                for ch in 0..ci {
                    for (i, j) in (0..kh).flat_map(|a| (0..kw).map(move |b| (a, b))) {
                        let (ih, iw) = (
                            (yy * st + i) as isize - p as isize,
                            (xx * st + j) as isize - p as isize,
                        );
                        if ih < 0 || iw < 0 || ih as usize >= h || iw as usize >= wd {
                            continue;
                        }
                        let xi = ((n * ci + ch) * h + ih as usize) * wd + iw as usize;
                        let wi = ((o * ci + ch) * kh + i) * kw + j;
                        y[out] += w[wi] * x[xi];
                        dx[xi] += w[wi] * dy[out];
                        dw[wi] += x[xi] * dy[out];
                    }
                }
            }
        }
    }
    (y, dx, dw)
}

fn f64s(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

fn shapes() -> Vec<ConvShape> {
    let conv = |ci, co, k, stride, padding| Conv2d {
        in_channels: ci,
        out_channels: co,
        kernel: k,
        stride,
        padding,
    };
    [
        (conv(3, 4, (3, 3), 1, 1), 2, (7, 6)),
        (conv(2, 5, (3, 3), 2, 1), 1, (8, 8)),
        (conv(4, 3, (1, 1), 1, 0), 2, (5, 5)),
        (conv(3, 2, (2, 2), 2, 0), 3, (6, 4)),
        (conv(2, 3, (3, 2), 1, 2), 1, (4, 5)),
        // A reduction of 288: three leaves' worth, split over tiles.
        (conv(32, 8, (3, 3), 1, 1), 2, (4, 4)),
    ]
    .into_iter()
    .map(|(c, n, hw)| c.on(n, hw).unwrap())
    .collect()
}

fn inputs(s: &ConvShape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let c = &s.conv;
    let x = uniform(s.in_rows() * c.in_channels, seed, -1.0, 1.0);
    let w = uniform(s.patch() * c.out_channels, seed + 1, -0.5, 0.5);
    let dy = uniform(s.out_rows() * c.out_channels, seed + 2, -1.0, 1.0);
    (x, w, dy)
}

#[test]
fn the_oracles_gradients_are_the_finite_differences_of_its_output() {
    for s in shapes().into_iter().take(5) {
        let (x, w, dy) = inputs(&s, 3);
        let (x, w, dy) = (f64s(&x), f64s(&w), f64s(&dy));
        let loss = |x: &[f64], w: &[f64]| -> f64 {
            oracle(&s, x, w, &dy)
                .0
                .iter()
                .zip(&dy)
                .map(|(a, b)| a * b)
                .sum()
        };
        let (_, dx, dw) = oracle(&s, &x, &w, &dy);
        let h = 1e-4;
        for k in [0, x.len() / 2, x.len() - 1] {
            let (mut up, mut down) = (x.clone(), x.clone());
            up[k] += h;
            down[k] -= h;
            let fd = (loss(&up, &w) - loss(&down, &w)) / (2.0 * h);
            assert!(
                (fd - dx[k]).abs() < 1e-6,
                "{s:?} dx[{k}]: {fd} vs {}",
                dx[k]
            );
        }
        for k in [0, w.len() / 3, w.len() - 1] {
            let (mut up, mut down) = (w.clone(), w.clone());
            up[k] += h;
            down[k] -= h;
            let fd = (loss(&x, &up) - loss(&x, &down)) / (2.0 * h);
            assert!(
                (fd - dw[k]).abs() < 1e-6,
                "{s:?} dw[{k}]: {fd} vs {}",
                dw[k]
            );
        }
    }
}

#[test]
fn conv2d_on_tiles_matches_the_oracle_with_the_same_bits_on_any_tile_count() {
    for (k, s) in shapes().iter().enumerate() {
        let (x, w, dy) = inputs(s, 10 + k as u64);
        let (y0, dx0, dw0) = oracle(s, &f64s(&x), &f64s(&w), &f64s(&dy));
        let first = conv2d_on_tiles(s, target(1), &x, &w, &dy).unwrap();
        // f32 sums of at most a few hundred products of values below 1.
        let close = |got: &[f32], want: &[f64], what: &str| {
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() < 1e-4,
                    "{s:?} {what}[{i}]: {g} vs {w}"
                );
            }
        };
        close(&first.y, &y0, "y");
        close(&first.dx, &dx0, "dx");
        close(&first.dw, &dw0, "dw");
        for tiles in [3, 16, 64] {
            let run = conv2d_on_tiles(s, target(tiles), &x, &w, &dy).unwrap();
            assert_eq!(bits(&run.y), bits(&first.y), "{s:?} on {tiles} tiles");
            assert_eq!(bits(&run.dx), bits(&first.dx), "{s:?} on {tiles} tiles");
            assert_eq!(bits(&run.dw), bits(&first.dw), "{s:?} on {tiles} tiles");
        }
    }
}

#[test]
fn conv2d_follows_pytorchs_padding_and_stride() {
    // torch.nn.functional.conv2d(ones(1, 1, 3, 3), ones(1, 1, 2, 2),
    // stride=1, padding=1): each output counts the input pixels under its
    // window; its input gradient with dy = ones counts the windows over
    // each pixel (4 everywhere for a 2x2 kernel on a padded 3x3).
    let conv = Conv2d {
        in_channels: 1,
        out_channels: 1,
        kernel: (2, 2),
        stride: 1,
        padding: 1,
    };
    let s = conv.on(1, (3, 3)).unwrap();
    assert_eq!(s.output, (4, 4));
    let run = conv2d_on_tiles(&s, target(4), &[1.0; 9], &[1.0; 4], &[1.0; 16]).unwrap();
    #[rustfmt::skip]
    let y = [1.0, 2.0, 2.0, 1.0, 2.0, 4.0, 4.0, 2.0, 2.0, 4.0, 4.0, 2.0, 1.0, 2.0, 2.0, 1.0];
    assert_eq!(run.y, y);
    assert_eq!(run.dx, [4.0; 9]);
    assert_eq!(run.dw, [9.0; 4]);
    // Stride 2 without padding on 5x5 (x = 0..25): windows at 0 and 2.
    let conv = Conv2d {
        stride: 2,
        padding: 0,
        ..conv
    };
    let s = conv.on(1, (5, 5)).unwrap();
    let x: Vec<f32> = (0..25).map(|v| v as f32).collect();
    let run = conv2d_on_tiles(&s, target(2), &x, &[1.0, 0.0, 0.0, 0.0], &[1.0; 4]).unwrap();
    assert_eq!(run.y, [0.0, 2.0, 10.0, 12.0]);
    // The last row and column feed no window: their gradient is zero.
    assert_eq!(run.dx[4], 0.0);
    assert_eq!(run.dx[0], 1.0);
    // Shapes that do not fit are refused, lengths are checked.
    assert!(conv.on(1, (1, 1)).is_none());
    assert!(matches!(
        conv2d_on_tiles(&s, target(2), &x[1..], &[1.0; 4], &[1.0; 4]),
        Err(ModelError::InputLength {
            expected: 25,
            got: 24
        })
    ));
}

/// `(y, dx)` of PyTorch's max/avg pooling (NCHW) in f64: max keeps the
/// first maximum in window order, average divides by the window's size.
fn pool_oracle(p: &Pool2d, s: &ConvShape, x: &[f64], dy: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (c, (kh, kw)) = (s.conv.in_channels, p.kernel);
    let ((h, w), (oh, ow)) = (s.input, s.output);
    let mut y = vec![0.0; s.n * c * oh * ow];
    let mut dx = vec![0.0; x.len()];
    for (nc, (yy, xx)) in
        (0..s.n * c).flat_map(|a| (0..oh * ow).map(move |b| (a, (b / ow, b % ow))))
    {
        let out = (nc * oh + yy) * ow + xx;
        let mut window = Vec::new();
        for (i, j) in (0..kh).flat_map(|a| (0..kw).map(move |b| (a, b))) {
            let (ih, iw) = (
                (yy * p.stride + i) as isize - p.padding as isize,
                (xx * p.stride + j) as isize - p.padding as isize,
            );
            if ih >= 0 && iw >= 0 && (ih as usize) < h && (iw as usize) < w {
                window.push((nc * h + ih as usize) * w + iw as usize);
            }
        }
        match p.kind {
            PoolKind::Max => {
                let best = window
                    .iter()
                    .copied()
                    .fold(window[0], |b, i| if x[i] > x[b] { i } else { b });
                y[out] = x[best];
                dx[best] += dy[out];
            }
            PoolKind::Avg => {
                let size = (kh * kw) as f64;
                y[out] = window.iter().map(|&i| x[i]).sum::<f64>() / size;
                for &i in &window {
                    dx[i] += dy[out] / size;
                }
            }
        }
    }
    (y, dx)
}

#[test]
fn pooling_on_tiles_matches_the_oracle_with_the_same_bits_on_any_tile_count() {
    let pool = |kind, k, stride, padding| Pool2d {
        kind,
        kernel: (k, k),
        stride,
        padding,
    };
    let cases = [
        (pool(PoolKind::Max, 2, 2, 0), 2, 3, (8, 8)),
        (pool(PoolKind::Max, 3, 2, 1), 1, 4, (7, 6)),
        (pool(PoolKind::Avg, 2, 2, 0), 2, 3, (6, 6)),
        (pool(PoolKind::Avg, 3, 1, 1), 1, 2, (5, 5)),
        (Pool2d::global((4, 4)), 3, 5, (4, 4)),
    ];
    for (k, (p, n, c, hw)) in cases.into_iter().enumerate() {
        let s = p.on(n, c, hw).unwrap();
        // Distinct values (no ties) for max pooling's argmax.
        let x = uniform(s.in_rows() * c, 30 + k as u64, -1.0, 1.0);
        let dy = uniform(s.out_rows() * c, 40 + k as u64, -1.0, 1.0);
        let (y0, dx0) = pool_oracle(&p, &s, &f64s(&x), &f64s(&dy));
        let first = pool2d_on_tiles(&p, &s, target(1), &x, &dy).unwrap();
        for (got, want, what) in [(&first.y, &y0, "y"), (&first.dx, &dx0, "dx")] {
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (f64::from(*g) - w).abs() < 1e-5,
                    "{p:?} {what}[{i}]: {g} vs {w}"
                );
            }
        }
        for tiles in [3, 16] {
            let run = pool2d_on_tiles(&p, &s, target(tiles), &x, &dy).unwrap();
            assert_eq!(bits(&run.y), bits(&first.y), "{p:?} on {tiles} tiles");
            assert_eq!(bits(&run.dx), bits(&first.dx), "{p:?} on {tiles} tiles");
        }
    }
}

#[test]
fn pooling_follows_pytorch_on_ties_padding_and_the_global_mean() {
    // max_pool2d(kernel 2, stride 1) of [[1, 1], [1, 1]]: PyTorch routes
    // the gradient to the first maximum of the window.
    let p = Pool2d {
        kind: PoolKind::Max,
        kernel: (2, 2),
        stride: 1,
        padding: 0,
    };
    let s = p.on(1, 1, (2, 2)).unwrap();
    let run = pool2d_on_tiles(&p, &s, target(2), &[1.0; 4], &[3.0]).unwrap();
    assert_eq!((run.y, run.dx), (vec![1.0], vec![3.0, 0.0, 0.0, 0.0]));
    // avg_pool2d(kernel 3, stride 1, padding 1) counts the padding: the
    // corner of a 2x2 map of ones averages 4 ones over 9.
    let p = Pool2d {
        kind: PoolKind::Avg,
        kernel: (3, 3),
        stride: 1,
        padding: 1,
    };
    let s = p.on(1, 1, (2, 2)).unwrap();
    let run = pool2d_on_tiles(&p, &s, target(2), &[1.0; 4], &[1.0; 4]).unwrap();
    assert_eq!(run.y, [4.0 / 9.0; 4]);
    // Global average pooling of x = 0..16 on one channel: 7.5.
    let p = Pool2d::global((4, 4));
    let s = p.on(1, 1, (4, 4)).unwrap();
    let x: Vec<f32> = (0..16).map(|v| v as f32).collect();
    let run = pool2d_on_tiles(&p, &s, target(3), &x, &[16.0]).unwrap();
    assert_eq!((run.y, run.dx), (vec![7.5], vec![1.0; 16]));
    // Padding over half the window is refused, as PyTorch refuses it.
    let wide = Pool2d { padding: 3, ..p };
    assert!(wide.on(1, 1, (4, 4)).is_none());
}

#[test]
fn batch_norm_over_feature_maps_matches_pytorch_training_semantics() {
    // BatchNorm2d in training (biased variance to normalise, eps 1e-5,
    // unbiased variance into the running statistics with momentum 0.1),
    // then ReLU, against an f64 oracle; the same bits on any tile count.
    let (n, c, hw) = (3, 4, 25);
    let x = uniform(n * c * hw, 50, -2.0, 3.0);
    let dy = uniform(n * c * hw, 51, -1.0, 1.0);
    let gamma = uniform(c, 52, 0.5, 1.5);
    let beta = uniform(c, 53, -0.5, 0.5);
    let first = batch_norm2d_on_tiles((n, c, hw), target(1), &x, (&gamma, &beta), &dy).unwrap();
    let count = (n * hw) as f64;
    for ch in 0..c {
        let idx: Vec<usize> = (0..n)
            .flat_map(|s| (0..hw).map(move |p| (s * c + ch) * hw + p))
            .collect();
        let mean = idx.iter().map(|&i| f64::from(x[i])).sum::<f64>() / count;
        let var = idx
            .iter()
            .map(|&i| (f64::from(x[i]) - mean).powi(2))
            .sum::<f64>()
            / count;
        let inv = 1.0 / (var + 1e-5).sqrt();
        let (g, b) = (f64::from(gamma[ch]), f64::from(beta[ch]));
        let xhat: Vec<f64> = idx
            .iter()
            .map(|&i| (f64::from(x[i]) - mean) * inv)
            .collect();
        let dz: Vec<f64> = idx
            .iter()
            .zip(&xhat)
            .map(|(&i, h)| {
                if g * h + b > 0.0 {
                    f64::from(dy[i])
                } else {
                    0.0
                }
            })
            .collect();
        let dbeta: f64 = dz.iter().sum();
        let dgamma: f64 = dz.iter().zip(&xhat).map(|(d, h)| d * h).sum();
        let near = |got: f32, want: f64, what: &str| {
            assert!(
                (f64::from(got) - want).abs() < 1e-4 * want.abs().max(1.0),
                "{what}[{ch}]: {got} vs {want}"
            );
        };
        near(first.dbeta[ch], dbeta, "dbeta");
        near(first.dgamma[ch], dgamma, "dgamma");
        near(first.running.0[ch], 0.1 * mean, "running mean");
        near(
            first.running.1[ch],
            0.9 + 0.1 * var * count / (count - 1.0),
            "running var",
        );
        for (k, &i) in idx.iter().enumerate() {
            near(first.y[i], (g * xhat[k] + b).max(0.0), "y");
            let dx = g * inv * (dz[k] - dbeta / count - xhat[k] * dgamma / count);
            near(first.dx[i], dx, "dx");
        }
    }
    for tiles in [2, 4, 16] {
        let run =
            batch_norm2d_on_tiles((n, c, hw), target(tiles), &x, (&gamma, &beta), &dy).unwrap();
        assert_eq!(bits(&run.y), bits(&first.y), "{tiles} tiles");
        assert_eq!(bits(&run.dx), bits(&first.dx), "{tiles} tiles");
        assert_eq!(bits(&run.dgamma), bits(&first.dgamma), "{tiles} tiles");
    }
}

#[test]
fn residual_add_gathers_the_second_branch_into_the_firsts_blocks() {
    // Two branches of a residual block cut differently by their own
    // products: the sum is the plain f32 (or f16-rounded) sum whatever
    // the layouts.
    let (rows, cols) = (12, 10);
    let x = uniform(rows * cols, 60, -1.0, 1.0);
    let y = uniform(rows * cols, 61, -1.0, 1.0);
    let layouts = [
        BlockLayout::grid(rows, cols, 3, 2, 8),
        BlockLayout::grid(rows, cols, 1, 5, 8),
        BlockLayout::grid(rows, cols, 4, 1, 8).shifted(3),
        BlockLayout::dense(rows, cols, 0),
    ];
    for half in [false, true] {
        let want: Vec<f32> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| {
                let s = a + b;
                if half {
                    <f16 as HalfFloat>::from_f32(s).to_f32()
                } else {
                    s
                }
            })
            .collect();
        for xl in &layouts {
            for yl in &layouts {
                let got = residual_add_on_tiles(target(16), (xl, yl), (&x, &y), half).unwrap();
                assert_eq!(bits(&got), bits(&want), "{xl:?} + {yl:?}");
            }
        }
    }
    let other = BlockLayout::dense(cols, rows, 0);
    assert!(residual_add_on_tiles(target(2), (&layouts[0], &other), (&x, &y), false).is_err());
}

#[test]
fn resnet50_convolutions_with_batch_norm_fit_one_mk2_at_micro_batch_1() {
    // The largest feature map of each stage (conv1's 64 channels of 112 x
    // 112, then 256 x 56 x 56 to 2048 x 7 x 7) with batch norm and ReLU,
    // forward and backward: batch norm's sums split over row blocks, so no
    // channel need be whole on a tile (whole channels took 937 kB on each
    // of conv1's tiles).
    let t = tessera_sim::ipu::Target::single(tessera_sim::IpuSpec::MK2_GC200);
    let c = |ci, co, k, stride, padding, hw| {
        let conv = Conv2d {
            in_channels: ci,
            out_channels: co,
            kernel: (k, k),
            stride,
            padding,
        };
        conv.on(1, (hw, hw)).unwrap()
    };
    let shapes = [
        c(3, 64, 7, 2, 3, 224),
        c(64, 256, 1, 1, 0, 56),
        c(128, 512, 1, 1, 0, 28),
        c(256, 1024, 1, 1, 0, 14),
        c(512, 2048, 1, 1, 0, 7),
    ];
    for s in shapes {
        let extras = ConvExtras {
            batch_norm: true,
            input_grad: true,
            ..ConvExtras::default()
        };
        let cost = conv2d_cycles(&s, extras, t).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        let tile = tessera_sim::IpuSpec::MK2_GC200.memory_per_tile();
        assert!(
            cost.max_tile_bytes <= tile,
            "{s:?}: {}",
            cost.max_tile_bytes
        );
        assert!(cost.forward > 0 && cost.backward > 0, "{s:?}");
    }
}

#[test]
fn every_resnet50_convolution_fits_one_mk2_at_micro_batch_1() {
    // The 23 distinct convolutions of ResNet-50 (224 x 224), forward and
    // backward in f32 on one Mk2. Measured: the fullest tile 63-147 KB of
    // 624 KiB, 20-50 thousand cycles each. With `dcols = dY W^T` cut onto
    // the patches' row blocks, 16 of them did not fit (every part gathered
    // whole rows of W^T: up to 2.4 MB on a tile).
    let t = tessera_sim::ipu::Target::single(tessera_sim::IpuSpec::MK2_GC200);
    let c = |ci, co, k, stride, padding, hw| {
        let conv = Conv2d {
            in_channels: ci,
            out_channels: co,
            kernel: (k, k),
            stride,
            padding,
        };
        conv.on(1, (hw, hw)).unwrap()
    };
    #[rustfmt::skip]
    let shapes = [
        c(3, 64, 7, 2, 3, 224),
        c(64, 64, 1, 1, 0, 56), c(64, 64, 3, 1, 1, 56), c(64, 256, 1, 1, 0, 56),
        c(256, 64, 1, 1, 0, 56), c(256, 128, 1, 1, 0, 56), c(128, 128, 3, 2, 1, 56),
        c(128, 512, 1, 1, 0, 28), c(512, 128, 1, 1, 0, 28), c(128, 128, 3, 1, 1, 28),
        c(256, 512, 1, 2, 0, 56), c(512, 256, 1, 1, 0, 28), c(256, 256, 3, 2, 1, 28),
        c(256, 1024, 1, 1, 0, 14), c(1024, 256, 1, 1, 0, 14), c(256, 256, 3, 1, 1, 14),
        c(512, 1024, 1, 2, 0, 28), c(1024, 512, 1, 1, 0, 14), c(512, 512, 3, 2, 1, 14),
        c(512, 2048, 1, 1, 0, 7), c(2048, 512, 1, 1, 0, 7), c(512, 512, 3, 1, 1, 7),
        c(1024, 2048, 1, 2, 0, 14),
    ];
    let mut total = 0;
    for s in shapes {
        let conv = s.conv;
        let x = vec![0.5; s.in_rows() * conv.in_channels];
        let w = vec![0.01; s.patch() * conv.out_channels];
        let dy = vec![0.1; s.out_rows() * conv.out_channels];
        let run = conv2d_on_tiles(&s, t, &x, &w, &dy).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        assert!(
            run.max_tile_bytes < 200_000,
            "{s:?}: {}",
            run.max_tile_bytes
        );
        total += run.cycles;
    }
    println!("ResNet-50 convolutions at micro-batch 1: {total} cycles forward and backward");
}
