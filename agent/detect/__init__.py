"""Detection: letterbox -> ONNX Runtime session -> YOLO decode -> NMS -> Detections."""
