"""Weight algorithms, side by side: GPTQ (:mod:`.gptq`, weight-only, Hessian-driven error compensation), AdaRound
(:mod:`.adaround`, learned rounding) and SeqMSE (:mod:`.seqmse`, output-error clipping search); the pipeline's
refinement step (:mod:`qlinear.ptq.algorithms.refine`) and weight-only quantization (:mod:`qlinear.ptq.weightonly`) call them."""
