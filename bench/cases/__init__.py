"""Case builders for the op suite, one module per op family: each exports cases(quick, dtypes) -> list[Case]."""
