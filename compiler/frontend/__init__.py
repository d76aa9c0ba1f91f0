"""Front end: read, parse and merge .bench files into a located settings document."""
