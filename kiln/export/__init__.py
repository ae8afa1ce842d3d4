"""Writing Kiln graphs in other formats: an int8 stage as a .tflite file (`kiln export`)."""
