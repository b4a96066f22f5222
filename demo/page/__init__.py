"""The page: the Gradio app, its layout, handlers, text and views. It reads runs only through the
session layer (`demo.session`) and the traces it returns, and touches no caches or logits."""
