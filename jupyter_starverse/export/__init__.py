"""Export: a trained model to ONNX (fp32, weight-only INT8/INT4), with a parity report."""
