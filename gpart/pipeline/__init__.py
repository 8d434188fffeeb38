"""The partition pipeline: input graph -> method (through the registry) -> layout -> a committed result
(SPEC.md section 4), typed graphs as the many-type case, and the memory plan that bounds each pass."""
