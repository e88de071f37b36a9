//! Which trainable parameter lives where in the flat, padded buffers of ZeRO's units, and the
//! moves between a model's parameters (or gradients) and those buffers.

use std::collections::HashMap;
use std::ops::Range;

use burn::backend::Autodiff;
use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, Tensor};
use burn_ascend::backend::{Ascend, AscendDevice};
use burn_ascend::AttnError;

use crate::model::transformer::Transformer;
use crate::train::recompute::Part;

type Ad = Autodiff<Ascend>;

/// One trainable parameter in its unit's flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The parameter.
    pub id: ParamId,
    /// Its shape.
    pub dims: Vec<usize>,
    /// Where it starts in the unit's buffer.
    pub offset: usize,
}

impl Slot {
    /// Its element count.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A group of parameters flattened together (FSDP's unit): the embedding, one block, or the
/// final norm with the output head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// What it is, for errors and reports.
    pub name: String,
    /// Its trainable parameters in module order.
    pub slots: Vec<Slot>,
    /// Elements of the parameters.
    pub len: usize,
    /// `len` rounded up to a multiple of the rank count (zeros after `len`).
    pub padded: usize,
}

/// The units of a model over `ranks` ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The units with at least one trainable parameter.
    pub units: Vec<Unit>,
    /// The rank count.
    pub ranks: usize,
}

struct Collect {
    slots: Vec<Slot>,
    len: usize,
    bad: Option<String>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let t = param.val();
        if !t.is_require_grad() {
            return;
        }
        if t.dtype() != DType::F32 && self.bad.is_none() {
            self.bad = Some(format!("{:?}", t.dtype()));
        }
        let dims = t.dims().to_vec();
        let slot = Slot {
            id: param.id,
            dims,
            offset: self.len,
        };
        self.len += slot.len();
        self.slots.push(slot);
    }
}

impl Layout {
    /// Where each trainable parameter lies: its unit, its range in that unit's flat buffer and
    /// its dims.
    pub(crate) fn param_slots(&self) -> HashMap<ParamId, (usize, Range<usize>, Vec<usize>)> {
        self.units
            .iter()
            .enumerate()
            .flat_map(|(u, unit)| {
                unit.slots
                    .iter()
                    .map(move |s| (s.id, (u, s.offset..s.offset + s.len(), s.dims.clone())))
            })
            .collect()
    }

    /// The units of `model`'s trainable parameters over `ranks` ranks. Trainable parameters
    /// must be f32 (master weights).
    pub fn of<B: AutodiffBackend>(model: &Transformer<B>, ranks: usize) -> Result<Self, AttnError> {
        let ranks = ranks.max(1);
        let mut units = Vec::new();
        let mut add = |name: String, visit: &dyn Fn(&mut Collect)| -> Result<(), AttnError> {
            let mut c = Collect {
                slots: Vec::new(),
                len: 0,
                bad: None,
            };
            visit(&mut c);
            if let Some(dtype) = c.bad {
                return Err(AttnError::Unsupported(format!(
                    "--zero: a trainable parameter of {name} is {dtype}; the sharded state \
                     holds f32 master weights"
                )));
            }
            if !c.slots.is_empty() {
                units.push(Unit {
                    name,
                    padded: c.len.div_ceil(ranks) * ranks,
                    len: c.len,
                    slots: c.slots,
                });
            }
            Ok(())
        };
        add("embed_tokens".into(), &|c| model.embed_tokens.visit(c))?;
        for (i, layer) in model.layers.iter().enumerate() {
            add(format!("layers.{i}"), &|c| layer.visit(c))?;
        }
        add("norm and lm_head".into(), &|c| {
            model.norm.visit(c);
            model.lm_head.visit(c);
        })?;
        Ok(Self { units, ranks })
    }

    /// Elements of a rank's slice of `unit`.
    pub fn shard_len(&self, unit: &Unit) -> usize {
        unit.padded / self.ranks
    }

    /// Rank `rank`'s slice of `unit`'s buffer.
    pub fn shard(&self, unit: &Unit, rank: usize) -> Range<usize> {
        let n = self.shard_len(unit);
        rank * n..(rank + 1) * n
    }

    /// The index of `part`'s unit; `None` when it has nothing trainable (a LoRA run's
    /// embedding and head).
    pub fn unit_of(&self, part: Part) -> Option<usize> {
        let name = match part {
            Part::Embedding => "embed_tokens".to_string(),
            Part::Block(i) => format!("layers.{i}"),
            Part::Head => "norm and lm_head".to_string(),
        };
        self.units.iter().position(|u| u.name == name)
    }

    /// Elements of every trainable parameter.
    pub fn params(&self) -> usize {
        self.units.iter().map(|u| u.len).sum()
    }
}

/// `parts` (1-D) one after the other, then zeros up to `padded` elements.
pub fn concat_padded(
    mut parts: Vec<Tensor<Ascend, 1>>,
    len: usize,
    padded: usize,
    device: &AscendDevice,
) -> Tensor<Ascend, 1> {
    if padded > len {
        parts.push(Tensor::zeros([padded - len], device));
    }
    if parts.len() == 1 {
        parts.pop().expect("one part")
    } else {
        Tensor::cat(parts, 0)
    }
}

/// A copy of `t` owning its storage (a slice of a larger buffer would keep all of it alive).
pub fn owned(t: Tensor<Ascend, 1>) -> Tensor<Ascend, 1> {
    t.mul_scalar(1.0)
}

struct Values<'a> {
    want: &'a HashMap<ParamId, usize>,
    out: Vec<Option<Tensor<Ascend, 1>>>,
}

impl ModuleVisitor<Ad> for Values<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        if let Some(&i) = self.want.get(&param.id) {
            let t = param.val().inner();
            let n = t.shape().num_elements();
            self.out[i] = Some(t.reshape([n]));
        }
    }
}

fn index(units: &[Unit]) -> HashMap<ParamId, usize> {
    units
        .iter()
        .flat_map(|u| &u.slots)
        .enumerate()
        .map(|(i, s)| (s.id, i))
        .collect()
}

/// Each unit's parameters of `model` flattened and padded (module order).
pub fn flat_params(
    model: &Transformer<Ad>,
    layout: &Layout,
    device: &AscendDevice,
) -> Result<Vec<Tensor<Ascend, 1>>, AttnError> {
    let want = index(&layout.units);
    let mut v = Values {
        out: vec![None; want.len()],
        want: &want,
    };
    model.visit(&mut v);
    concat_units(&layout.units, v.out, "parameter", device)
}

/// Each of `units` as one flat padded buffer of its slots' tensors, `values` holding them in
/// slot order (what a visitor collected through [`index`]); a slot without one is `what`
/// missing.
fn concat_units(
    units: &[Unit],
    values: Vec<Option<Tensor<Ascend, 1>>>,
    what: &str,
    device: &AscendDevice,
) -> Result<Vec<Tensor<Ascend, 1>>, AttnError> {
    let mut values = values.into_iter();
    units
        .iter()
        .map(|u| {
            let parts = u
                .slots
                .iter()
                .map(|s| values.next().flatten().ok_or_else(|| missing(u, s, what)))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(concat_padded(parts, u.len, u.padded, device))
        })
        .collect()
}

fn missing(u: &Unit, s: &Slot, what: &str) -> AttnError {
    AttnError::invalid(
        "--zero",
        format!(
            "the {what} of a {:?} tensor of {} is missing (the model changed since the layout)",
            s.dims, u.name
        ),
    )
}

struct TakeGrad<'a> {
    grads: &'a mut GradientsParams,
    want: &'a HashMap<ParamId, usize>,
    out: Vec<Option<Tensor<Ascend, 1>>>,
}

impl ModuleVisitor<Ad> for TakeGrad<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Ad, D>>) {
        if let Some(&i) = self.want.get(&param.id) {
            if let Some(g) = self.grads.remove::<Ascend, D>(param.id) {
                let n = g.shape().num_elements();
                self.out[i] = Some(g.reshape([n]));
            }
        }
    }
}

/// Each unit's gradients flattened and padded. A trainable parameter the backward pass gave
/// no gradient (it did not reach the loss) is refused: the replicated optimizer skips such a
/// parameter (no weight decay, no moment decay), which a shard of zeros would not reproduce.
pub fn flat_grads(
    model: &Transformer<Ad>,
    mut grads: GradientsParams,
    layout: &Layout,
    device: &AscendDevice,
) -> Result<Vec<Tensor<Ascend, 1>>, AttnError> {
    flat_grads_of(model, &mut grads, &layout.units, device)
}

/// [`flat_grads`] of `units` only, taken out of `grads`.
pub fn flat_grads_of(
    model: &Transformer<Ad>,
    grads: &mut GradientsParams,
    units: &[Unit],
    device: &AscendDevice,
) -> Result<Vec<Tensor<Ascend, 1>>, AttnError> {
    let want = index(units);
    let mut v = TakeGrad {
        grads,
        out: vec![None; want.len()],
        want: &want,
    };
    model.visit(&mut v);
    concat_units(units, v.out, "gradient", device)
}

/// Sets each unit's parameters from its whole flat buffer `flat[u]` (views of it); with
/// `None` the trainable parameters become empty placeholders (ZeRO-3 between steps).
pub struct SetUnits<'a> {
    by_id: HashMap<ParamId, (usize, Range<usize>, Vec<usize>)>,
    flat: Option<&'a [Tensor<Ascend, 1>]>,
    device: AscendDevice,
}

impl<'a> SetUnits<'a> {
    /// Sets unit `unit` of `layout` alone from its whole buffer `flat[0]`.
    pub fn unit(
        layout: &Layout,
        unit: usize,
        flat: &'a [Tensor<Ascend, 1>],
        device: AscendDevice,
    ) -> Self {
        let by_id = layout.units[unit]
            .slots
            .iter()
            .map(|s| (s.id, (0, s.offset..s.offset + s.len(), s.dims.clone())))
            .collect();
        Self {
            by_id,
            flat: Some(flat),
            device,
        }
    }

    /// Sets from `flat` (one whole buffer per unit of `layout`), or releases with `None`.
    pub fn new(
        layout: &Layout,
        flat: Option<&'a [Tensor<Ascend, 1>]>,
        device: AscendDevice,
    ) -> Self {
        Self {
            by_id: layout.param_slots(),
            flat,
            device,
        }
    }
}

impl ModuleMapper<Ad> for SetUnits<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<Ad, D>>) -> Param<Tensor<Ad, D>> {
        let (id, tensor, mapper) = param.consume();
        let Some((u, range, dims)) = self.by_id.remove(&id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let dims: [usize; D] = std::array::from_fn(|i| dims[i]);
        let inner = match self.flat {
            Some(flat) => flat[u].clone().slice(range).reshape(dims),
            // An empty tensor of the parameter's rank: nothing to read by mistake.
            // An empty tensor (one 512-byte pool block) of the parameter's rank.
            None => Tensor::<Ascend, D>::empty([0; D], &self.device),
        };
        let value = Tensor::<Ad, D>::from_inner(inner).require_grad();
        Param::from_mapped_value(id, value, mapper)
    }
}
