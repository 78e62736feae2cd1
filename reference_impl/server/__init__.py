"""The reference server: SGLang's HTTP API over the engine core and the tiny hybrid model, on CPU."""
