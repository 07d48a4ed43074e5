"""Roofline cost model: device specs, per-op durations, calibration on the local machine.

docs/design.md section 6 ("Costs"): where a graph source has no measured op times (the JAX/HLO front
end), an op's cost is a roofline, max(flops / (eff_f * peak), bytes / (eff_b * bandwidth)) +
launch overhead, with per-op-class efficiencies calibrated on the local machine and validated
against whole-program measured step time (the experiment experiments/cost_model_validation.py,
run by experiments/validate_cost_model.py).

  spec = device_spec("v100")                               # or "local" with a calibration
  cal = calibrate(sizes="quick")                           # or Calibration.load(path)
  h = hlo_graph(lower_hlo_text(step, *args, stage="post"))  # HloGraph; lower_hlo_text from
                                                           # simulator.frontends.hlo
  g = apply_cost_model(h, device_spec("local", cal), cal)  # a CompGraph with cost filled

Dependency direction: the cost model reads the front end's HloGraph (`simulator.frontends`);
the front end never imports the cost model. `simulator.from_jax(..., device_spec=...)` and the
`jax:` graph source, which compose the two, live in `simulator.sources.jax_program`.

Modules: `devices` (DeviceSpec registry), `opclass` (op classes and per-op roofline inputs,
read from post-optimisation HLO), `roofline` (durations), `calibration` (the Calibration file),
`microbench` (the calibration programs and their timing), `calibrate` (measure + fit). The
package exports the function `calibrate`, which hides the module of the same name as an
attribute: import the module's other names with
`from simulator.costmodel.calibrate import fit_calibration`.
"""

from simulator.costmodel.calibrate import calibrate
from simulator.costmodel.calibration import Calibration
from simulator.costmodel.devices import DEVICES, DeviceSpec, available, device_spec, local_spec
from simulator.costmodel.opclass import OP_CLASSES, OpLeaves, features, hlo_graph
from simulator.costmodel.roofline import (DEFAULT_BYTES_EFF, DEFAULT_FLOPS_EFF, RooflineParams,
                                          apply_cost_model, class_breakdown, durations)

__all__ = ["Calibration", "DEFAULT_BYTES_EFF", "DEFAULT_FLOPS_EFF", "DEVICES", "DeviceSpec",
           "OP_CLASSES", "OpLeaves", "RooflineParams", "apply_cost_model", "available",
           "calibrate", "class_breakdown", "device_spec", "durations", "features", "hlo_graph",
           "local_spec"]
