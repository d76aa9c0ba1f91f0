"""Reports: targets side by side per sweep point, as tables and a bar chart."""
