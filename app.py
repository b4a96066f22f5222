"""The Space entry point: build the page and serve it.

    python app.py                                serves on http://127.0.0.1:7860 (or the next free port)
    GRADIO_SERVER_NAME=0.0.0.0 python app.py     listens on every interface (Hugging Face sets this)
    GRADIO_SERVER_PORT=8000 python app.py        on another port
    DEMO_PRELOAD=embedded python app.py          loads the named presets first, as on a Space

`demo.page.server.launch` sets the rest: a bounded queue, one decoder at a time, the upload limit, no share
link, and no Python errors shown to users; those, with their tracebacks, go to this process's log
(stderr).

Off a Space nothing is loaded at import; the default preset warms up in the background once the
server is up. On a Space (SPACE_ID set) or with DEMO_PRELOAD=name,name, the presets load here, at
module scope in the main process, before the page exists: on ZeroGPU that is where models must be
placed on `cuda` (`demo.models.zerogpu`). A preset that fails to load is named on the page with the
reason; the others are served.
"""

import logging

from demo.models import presets, zerogpu
from demo.page import server

PRELOAD = zerogpu.preload_names(presets.DEFAULT_PRESET)

if PRELOAD:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from demo.models import preloading

    preloading.preload(PRELOAD)

demo = server.build_demo()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server.launch(demo, warm=None if PRELOAD else presets.DEFAULT_PRESET)
