//! Tests of the quantised products: a dense and a convolution layer's
//! products against an f64 oracle of their quantised inputs.

use super::super::{Placement, dense, standalone_link, write_rows};
use super::*;
use crate::ipu::{IpuParams, IpuSpec, Target};
use crate::model::quant::{Accumulator, Recipe};

/// An f64 oracle of a quantisation of the stored `rows x cols` matrix
/// `x` for a reduction along its rows (`k_rows`) or columns: the
/// exponent from the f64 amax by search, MX scales by the spec's floor
/// rule, each element rounded by core's `chop` with its keyed bits.
fn oracle_quant(
    q: RoleQuant,
    x: &[f32],
    (rows, cols, k_rows): (usize, usize, bool),
    stream: RandomStream,
) -> Vec<f32> {
    let max = f64::from(q.format.max());
    let chop = |v: f32, k: i32, pos: usize| oracle_chop(q, stream, v, k, pos);
    if q.scaling == Scaling::Tensor {
        let amax = x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
        let k = oracle_exponent(q, amax);
        return x.iter().enumerate().map(|(p, v)| chop(*v, k, p)).collect();
    }
    let (lines, len) = if k_rows { (cols, rows) } else { (rows, cols) };
    let pos = |i: usize, t: usize| if k_rows { t * cols + i } else { i * cols + t };
    if q.scaling == Scaling::Nvfp4 {
        return oracle_nvfp4(q, x, (lines, len), &pos, stream);
    }
    let emax = libm::floor(libm::log2(max)) as i32;
    let mut out = vec![0.0; x.len()];
    for i in 0..lines {
        for b in (0..len).step_by(32) {
            let ts = b..(b + 32).min(len);
            let amax = ts
                .clone()
                .fold(0.0f64, |m, t| m.max(f64::from(x[pos(i, t)].abs())));
            let k = if amax > 0.0 {
                emax - libm::floor(libm::log2(amax)) as i32
            } else {
                127
            };
            for t in ts {
                out[pos(i, t)] = chop(x[pos(i, t)], k, pos(i, t));
            }
        }
    }
    out
}

/// The per-tensor exponent of `amax` by search: the largest `k` with
/// `amax 2^k <= max` (0 for a zero amax).
fn oracle_exponent(q: RoleQuant, amax: f64) -> i32 {
    let max = f64::from(q.format.max());
    let mut k = 0i32;
    if amax > 0.0 {
        while amax * 2f64.powi(k) > max {
            k -= 1;
        }
        while amax * 2f64.powi(k + 1) <= max {
            k += 1;
        }
    }
    k
}

/// `v` (at matrix position `pos`) scaled by `2^k`, rounded by core's
/// `chop` with its keyed bits (saturating), scaled back.
fn oracle_chop(q: RoleQuant, stream: RandomStream, v: f32, k: i32, pos: usize) -> f32 {
    let value = [v];
    let bits = Keyed::line(stream, &value, pos as u64, 0);
    let scaled = (f64::from(v) * 2f64.powi(k)) as f32;
    let r = q.format.chop_with(scaled, q.round, &bits, 0);
    (f64::from(r) * 2f64.powi(-k)) as f32
}

/// NVFP4 of each line by core's `Nvfp4` (whose arithmetic core's
/// tests check), under the tensor scale `fl(amax / 2688)` of the f64
/// amax, each element's bits keyed by its matrix position.
fn oracle_nvfp4(
    q: RoleQuant,
    x: &[f32],
    (lines, len): (usize, usize),
    pos: &dyn Fn(usize, usize) -> usize,
    stream: RandomStream,
) -> Vec<f32> {
    let amax = x.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
    let t = if amax == 0.0 {
        1.0
    } else {
        ((amax / 2688.0) as f32).max(f32::from_bits(1))
    };
    let nv = Nvfp4::new(q.round);
    let mut out = vec![0.0; x.len()];
    for i in 0..lines {
        let line: Vec<f32> = (0..len).map(|t| x[pos(i, t)]).collect();
        let step = if len > 1 { pos(i, 1) - pos(i, 0) } else { 0 };
        let bits = Keyed::line(stream, &line, pos(i, 0) as u64, step as u64);
        let mut codes = vec![0u8; Nvfp4::codes_len(len)];
        let mut scales = vec![0u8; Nvfp4::scales_len(len)];
        nv.quantize(&line, t, &mut codes, &mut scales, &bits, 0)
            .unwrap();
        let mut done = vec![0.0; len];
        Nvfp4::dequantize(&codes, &scales, t, &mut done).unwrap();
        for (t, v) in done.into_iter().enumerate() {
            out[pos(i, t)] = v;
        }
    }
    out
}

/// `op(a) op(b)` of row-major stored matrices, products in f32 (exact
/// for every recipe but NVFP4, whose f32 tensor scale is in the
/// values), each exact sum (f64) in increasing `k` rounded to the
/// accumulator
/// (f32 or f16, to nearest even) and promoted into an f32 total every
/// `promote_every` additions: core's `RoundedMatmul`, for `k <= 128`
/// (one leaf of the product's tree).
fn oracle_product(
    (a, ta): (&[f32], bool),
    (b, tb): (&[f32], bool),
    (m, k, n): (usize, usize, usize),
    acc: Accumulator,
) -> Vec<f32> {
    let at = |i: usize, t: usize| if ta { a[t * m + i] } else { a[i * k + t] };
    let bt = |t: usize, j: usize| if tb { b[j * k + t] } else { b[t * n + j] };
    let (round, every): (fn(f64) -> f32, _) = match acc {
        Accumulator::F32 => (|s| s as f32, None),
        Accumulator::F16 { promote_every } => (
            |s| tessera_core::fp::f16::from_f64(s).to_f32(),
            promote_every,
        ),
    };
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut total, mut part) = (0.0f32, 0.0f32);
            for t in 0..k {
                part = round(f64::from(part) + f64::from(at(i, t) * bt(t, j)));
                if every.is_some_and(|e| (t + 1) % e.get() == 0) {
                    total = (f64::from(total) + f64::from(part)) as f32;
                    part = 0.0;
                }
            }
            c[i * n + j] = if every.is_some() {
                (f64::from(total) + f64::from(part)) as f32
            } else {
                part
            };
        }
    }
    c
}

/// Every new mode's default recipe, NVFP4, and two with an f16
/// accumulator (promoted every 4 additions in the second).
fn recipes() -> [Recipe; 7] {
    let f16 = Recipe {
        accumulator: Accumulator::F16,
        ..Recipe::FP8
    };
    let promoted = Recipe {
        accumulator: Accumulator::F16 {
            promote_every: core::num::NonZeroUsize::new(4),
        },
        ..Recipe::MXFP4
    };
    let defaults = [Recipe::FP8, Recipe::MXFP8, Recipe::MXFP6, Recipe::MXFP4];
    let [fp8, mx8, mx6, mx4] = defaults;
    [fp8, mx8, mx6, mx4, Recipe::NVFP4, f16, promoted]
}

fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let s = RandomStream::new(u64::from(seed), 3);
    (0..n as u64)
        .map(|i| (s.bits(i) as f32 / u32::MAX as f32 - 0.5) * scale)
        .collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// A dense layer's three products in every new mode's recipe and with
/// an f16 accumulator, on 8 tiles (so operands are cut and MX lines
/// regathered), against the oracle bit for bit.
#[test]
fn dense_products_equal_the_oracle_of_the_quantised_inputs() {
    let (batch, fan_in, width) = (6, 70, 24);
    let spec = IpuSpec::new(IpuParams {
        tiles: 8,
        ..IpuParams::default()
    })
    .unwrap();
    let target = Target::single(spec);
    let x = values(batch * fan_in, 1, 4.0);
    let w = values(fan_in * width, 2, 0.3);
    let dz = values(batch * width, 3, 1e-3);
    for recipe in recipes() {
        let (placement, link) = (Placement::Spread, standalone_link());
        let mut b = Builder::standalone(&target, &placement, &link, batch);
        b.quant = Some(recipe);
        let layout = BlockLayout::grid(batch, fan_in, 2, 3, 8);
        let input = b.matrix("x", &layout).unwrap();
        let cut = Cut::default();
        let layer = dense::forward(&mut b, 1, &input, width, cut).unwrap();
        let dz_t = b.matrix("dz", &layer.y.layout).unwrap();
        let ones = b.tensor(
            "ones",
            batch,
            crate::ipu::Mapping::one_tile(0, batch as u64),
        );
        let ((dw, _), da) = dense::backward(
            &mut b,
            1,
            (&layer, &input),
            &dz_t,
            ones.unwrap(),
            Some(&layout),
        )
        .unwrap();
        let mut e = b.engine().unwrap();
        write_rows(&mut e, &input, &x);
        write_rows(&mut e, &layer.w, &w);
        write_rows(&mut e, &dz_t, &dz);
        e.run();
        let read = |a: &Act| super::super::read_rows(&e, a);
        let stream = |name: &str| RandomStream::new(SEED, fnv(name));
        let (act, wq, gq) = (recipe.activations, recipe.weights, recipe.gradients);
        let acc = recipe.accumulator;
        // Y = X W.
        let qx = oracle_quant(
            act,
            &x,
            (batch, fan_in, false),
            stream("layer1.fwd.activations"),
        );
        let qw = oracle_quant(wq, &w, (fan_in, width, true), stream("layer1.fwd.weights"));
        let y = oracle_product((&qx, false), (&qw, false), (batch, fan_in, width), acc);
        assert_eq!(bits(&read(&layer.y)), bits(&y), "{recipe:?} forward");
        // dW = X^T dZ.
        let qx = oracle_quant(
            act,
            &x,
            (batch, fan_in, true),
            stream("layer1.dw.activations"),
        );
        let qd = oracle_quant(gq, &dz, (batch, width, true), stream("layer1.dw.gradients"));
        let dw_o = oracle_product((&qx, true), (&qd, false), (fan_in, batch, width), acc);
        assert_eq!(bits(&read(&dw)), bits(&dw_o), "{recipe:?} dW");
        // dA = dZ W^T.
        let qd = oracle_quant(
            gq,
            &dz,
            (batch, width, false),
            stream("layer1.da.gradients"),
        );
        let qw = oracle_quant(wq, &w, (fan_in, width, false), stream("layer1.da.weights"));
        let da_o = oracle_product((&qd, false), (&qw, true), (batch, width, fan_in), acc);
        assert_eq!(bits(&read(&da.unwrap())), bits(&da_o), "{recipe:?} dA");
    }
}

/// A convolution's forward and weight-gradient products in every new
/// mode's recipe and with an f16 accumulator against the oracle of its
/// quantised patches.
#[test]
fn conv_products_equal_the_oracle_of_the_quantised_inputs() {
    use crate::model::shapes::Conv2d;
    let conv = Conv2d {
        in_channels: 3,
        out_channels: 5,
        kernel: (3, 3),
        stride: 1,
        padding: 1,
    };
    let (n, hw) = (2, 4);
    let shape = conv.on(n, (hw, hw)).unwrap();
    let spec = IpuSpec::new(IpuParams {
        tiles: 4,
        ..IpuParams::default()
    })
    .unwrap();
    let target = Target::single(spec);
    let (rows, patch, cout) = (shape.out_rows(), shape.patch(), 5);
    let x = values(shape.in_rows() * 3, 4, 2.0);
    let w = values(patch * cout, 5, 0.5);
    let dy = values(rows * cout, 6, 1e-2);
    for recipe in recipes() {
        let (placement, link) = (Placement::Spread, standalone_link());
        let mut b = Builder::standalone(&target, &placement, &link, n);
        b.quant = Some(recipe);
        let layout = BlockLayout::grid(shape.in_rows(), 3, 4, 1, 4);
        let input = b.matrix("x", &layout).unwrap();
        let layer = super::super::conv2d::forward(&mut b, 2, &shape, &input, Cut::default());
        let layer = layer.unwrap();
        let dy_t = b.matrix("dy", &layer.y.layout).unwrap();
        let back = super::super::conv2d::backward(&mut b, 2, &shape, &layer, &dy_t, Some(&layout));
        let (dw, dx) = back.unwrap();
        let mut e = b.engine().unwrap();
        write_rows(&mut e, &input, &x);
        write_rows(&mut e, &layer.w, &w);
        write_rows(&mut e, &dy_t, &dy);
        e.run();
        let read = |a: &Act| super::super::read_rows(&e, a);
        let cols = read(&layer.cols);
        let stream = |name: &str| RandomStream::new(SEED, fnv(name));
        let (act, wq, gq) = (recipe.activations, recipe.weights, recipe.gradients);
        let acc = recipe.accumulator;
        let qc = oracle_quant(
            act,
            &cols,
            (rows, patch, false),
            stream("layer2.fwd.activations"),
        );
        let qw = oracle_quant(wq, &w, (patch, cout, true), stream("layer2.fwd.weights"));
        let y = oracle_product((&qc, false), (&qw, false), (rows, patch, cout), acc);
        assert_eq!(bits(&read(&layer.y)), bits(&y), "{recipe:?} forward");
        let qc = oracle_quant(
            act,
            &cols,
            (rows, patch, true),
            stream("layer2.dw.activations"),
        );
        let qd = oracle_quant(gq, &dy, (rows, cout, true), stream("layer2.dw.gradients"));
        let dw_o = oracle_product((&qc, true), (&qd, false), (patch, rows, cout), acc);
        assert_eq!(bits(&read(&dw)), bits(&dw_o), "{recipe:?} dW");
        // dA: the patches' gradient dY W^T, summed over each pixel's
        // taps in tap order (col2im).
        let qd = oracle_quant(
            gq,
            &dy,
            (rows, cout, false),
            stream("layer2.dcols.gradients"),
        );
        let qw = oracle_quant(wq, &w, (patch, cout, false), stream("layer2.dcols.weights"));
        let dcols = oracle_product((&qd, false), (&qw, true), (rows, cout, patch), acc);
        let mut dx_o = vec![0.0f32; shape.in_rows() * 3];
        for (r, row) in dx_o.chunks_exact_mut(3).enumerate() {
            for (at, t) in shape.taps_of(r) {
                for (c, d) in row.iter_mut().enumerate() {
                    *d += dcols[at * patch + t * 3 + c];
                }
            }
        }
        assert_eq!(bits(&read(&dx.unwrap())), bits(&dx_o), "{recipe:?} dA");
    }
}

/// A dense layer's forward product with delayed scales against the
/// oracle: the activations cast with the scale of a history amax a
/// quarter of their current one (values above saturate, counted), the
/// weights with the scale of a history amax of 1000, `2^-3` (a negative
/// exponent, reported as itself); each cast block records its own amax.
#[test]
fn a_dense_product_with_delayed_scales_equals_the_oracle() {
    let (batch, fan_in, width) = (6, 70, 24);
    let spec = IpuSpec::new(IpuParams {
        tiles: 8,
        ..IpuParams::default()
    })
    .unwrap();
    let target = Target::single(spec);
    let x = values(batch * fan_in, 1, 4.0);
    let w = values(fan_in * width, 2, 0.3);
    let delayed: RoleQuant = "f143:nearest:delayed4".parse().unwrap();
    let recipe = Recipe {
        weights: delayed,
        activations: delayed,
        ..Recipe::FP8
    };
    let (placement, link) = (Placement::Spread, standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, batch);
    b.quant = Some(recipe);
    let layout = BlockLayout::grid(batch, fan_in, 2, 3, 8);
    let input = b.matrix("x", &layout).unwrap();
    let layer = dense::forward(&mut b, 1, &input, width, Cut::default()).unwrap();
    let quant = b.quant_stats.clone();
    let mut e = b.engine().unwrap();
    write_rows(&mut e, &input, &x);
    write_rows(&mut e, &layer.w, &w);
    let history = |name: &str| {
        if name.ends_with("activations") {
            0.5
        } else {
            1000.0
        }
    };
    for q in &quant {
        let d = q.delayed.expect("delayed");
        e.write_tensor(d.amax, &vec![history(&q.name); d.blocks])
            .unwrap();
    }
    e.run();
    let stream = |name: &str| RandomStream::new(SEED, fnv(name));
    let cast = |v: &[f32], name: &str, k: i32| -> Vec<f32> {
        let chop = |(p, v): (usize, &f32)| oracle_chop(delayed, stream(name), *v, k, p);
        v.iter().enumerate().map(chop).collect()
    };
    let (ka, kw) = (
        oracle_exponent(delayed, 0.5),
        oracle_exponent(delayed, 1000.0),
    );
    let qx = cast(&x, "layer1.fwd.activations", ka);
    let qw = cast(&w, "layer1.fwd.weights", kw);
    let y = oracle_product(
        (&qx, false),
        (&qw, false),
        (batch, fan_in, width),
        Accumulator::F32,
    );
    assert_eq!(bits(&super::super::read_rows(&e, &layer.y)), bits(&y));
    let max = f64::from(delayed.format.max());
    assert!(quant[0].name.ends_with("activations") && (ka, kw) == (8, -3));
    for (q, v, k) in [(&quant[0], &x, ka), (&quant[1], &w, kw)] {
        let s = e.read_tensor::<f32>(q.stats).unwrap();
        let blocks: Vec<&[f32]> = s.chunks_exact(q.stride()).collect();
        let over = v
            .iter()
            .filter(|v| (f64::from(v.abs()) * 2f64.powi(k)) > max);
        let amax = v.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(blocks.iter().all(|b| b[0] == k as f32), "{}", q.name);
        let saturated: f32 = blocks.iter().map(|b| b[1]).sum();
        assert_eq!(saturated, over.count() as f32, "{}", q.name);
        assert_eq!(blocks.iter().map(|b| b[3]).fold(0.0, f32::max), amax);
    }
}
