"""Model calls: providers (`providers`, `provider_choice`, `offline`: a deterministic stand-in
with no network), what each kind of call asks (`prompts`), structured answers re-asked until they
fit (`structured`), the server's own token counts (`tokenizers`) and a request rebuilt smaller
after a "context too long" refusal (`refits`), and every call made for a run reserved, sent,
retried and settled against its budget (`calls`).
"""
