"""The Space entry point: build the page and serve it.

    python app.py                                serves on http://127.0.0.1:7860 (or the next free port)
    GRADIO_SERVER_NAME=0.0.0.0 python app.py     listens on every interface (Hugging Face sets this)
    GRADIO_SERVER_PORT=8000 python app.py        on another port

`demo.ui.launch` sets the rest: a bounded queue, one decoder at a time, the upload limit, no share
link, and no Python errors shown to users; those, with their tracebacks, go to this process's log
(stderr). Nothing is loaded at import; the default preset warms up in the background once the
server is up.
"""

import logging

from demo import ui

demo = ui.build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ui.launch(demo)
