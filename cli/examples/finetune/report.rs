//! What `finetune` shows at the end of a run: the loss curve as a PNG and a few sampled
//! continuations through the paged KV cache.

use std::path::Path;

use burn_ascend_model::load::data::SplitMix;
use burn_ascend_model::load::tokenizer::Tokenizer;
use burn_ascend_model::serve::generate::{generate_batch, Generator, Sampling};
use burn_ascend_model::Transformer;

/// The loss curve as a PNG (axis labels when a system font is found).
pub(crate) fn plot_losses(losses: &[f32], path: &Path) -> Result<(), String> {
    use plotters::prelude::*;
    let font = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf",
        "/System/Library/Fonts/Supplemental/Arial.ttf",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .is_some_and(|bytes| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, Box::leak(bytes.into()))
            .is_ok()
    });
    let err = |e: &dyn std::fmt::Display| format!("plotting {}: {e}", path.display());
    let root = BitMapBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let max = losses.iter().copied().fold(0.0f32, f32::max).max(1e-3);
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if font {
        builder
            .caption("finetune: training loss", ("sans-serif", 24))
            .x_label_area_size(40)
            .y_label_area_size(50);
    }
    let mut chart = builder
        .build_cartesian_2d(0..losses.len().max(1), 0f32..max * 1.05)
        .map_err(|e| err(&e))?;
    let mut mesh = chart.configure_mesh();
    if font {
        mesh.x_desc("step").y_desc("loss (nats/token)");
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw().map_err(|e| err(&e))?;
    chart
        .draw_series(LineSeries::new(
            losses.iter().enumerate().map(|(i, &l)| (i, l)),
            &BLUE,
        ))
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// Continues a few prompts together through the paged KV cache, greedy and nucleus sampling.
pub(crate) fn print_samples<Bk: burn_ascend::TrainingBackend>(
    model: Transformer<Bk>,
    tokenizer: &Tokenizer,
    seed: u64,
) -> Result<(), String> {
    let device = model.embed_tokens.weight.val().device();
    let mut gen = Generator::new(model, 64, 16, &device).map_err(|e| e.to_string())?;
    let prompts = [
        "ROMEO:\n",
        "First Citizen:\nWe are",
        "KING RICHARD II:\nNow",
    ];
    let ids: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| tokenizer.encode(p))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let nucleus = Sampling::TopP {
        top_p: 0.9,
        temperature: 0.8,
    };
    let sampling = [Sampling::Greedy, nucleus, nucleus];
    let run = generate_batch(&mut gen, &ids, 120, &sampling, &mut SplitMix(seed))
        .map_err(|e| e.to_string())?;
    for (i, (prompt, out)) in prompts.iter().zip(&run.generated).enumerate() {
        println!(
            "--- sample {} ({:?}) ---\n{prompt}{}",
            i + 1,
            sampling[i],
            tokenizer.decode(out)
        );
    }
    gen.clear().map_err(|e| e.to_string())
}
