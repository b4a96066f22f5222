"""The Space entry point: build the page and serve it.

    python app.py                                serves on http://127.0.0.1:7860 (or the next free port)
    GRADIO_SERVER_NAME=0.0.0.0 python app.py     listens on every interface (Hugging Face sets this)
    GRADIO_SERVER_PORT=8000 python app.py        on another port

Nothing is loaded at import; the default preset warms up in the background once the server is up.
"""

import os

from demo import ui

demo = ui.build_demo()

if __name__ == "__main__":
    ui.launch(
        demo,
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        share=False,
    )
