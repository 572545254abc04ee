"""Fixtures: one loaded model for the whole run ($KVSTITCH_MODEL, the
SmolLM2-135M Q4_1 GGUF scripts/fetch-model.sh fetches), 2 threads."""
import os
import sys

import pytest

import kvstitch

# tests/redis_server.py, shared with the server suite
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests"))

QUICK = os.environ.get("KVSTITCH_TEST_QUICK", "0") not in ("", "0")


@pytest.fixture(scope="session")
def model_path():
    path = os.environ.get("KVSTITCH_MODEL")
    if not path or not os.path.exists(path):
        pytest.fail("KVSTITCH_MODEL must name the test model (scripts/fetch-model.sh prints it)")
    return path


@pytest.fixture(scope="session")
def model(model_path):
    return kvstitch.Model.load(model_path, threads=2)


@pytest.fixture(scope="session")
def tiny_model():
    """A 1-layer random llama (../shared/models): the same binding paths at a
    fraction of the compute, for the many-call leak check."""
    shared = os.environ.get("KVSTITCH_SHARED") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")
    path = os.path.join(shared, "models", "llama-2-tiny-random.gguf")
    if not os.path.exists(path):
        pytest.fail(f"{path} missing: set KVSTITCH_SHARED to the shared test data")
    return kvstitch.Model.load(path, threads=1)


@pytest.fixture()
def cache(model):
    c = kvstitch.Cache(model, budget_bytes=256 << 20)
    yield c


# A long shared context and two questions over it: the prompts share ~all
# tokens but the question's.
MANUAL = "".join(f"Step {i}: turn valve {i} a quarter turn and wait {i + 2} seconds. " for i in range(12))
Q1 = "Question: which valve comes first?"
Q2 = "Question: how long after valve 7?"

DOC_A = ("The Eiffel Tower was built from 1887 to 1889 as the entrance arch to the "
         "1889 World's Fair in Paris. ")
DOC_B = ("Gustave Eiffel's company designed and built the tower; its engineers Maurice "
         "Koechlin and Emile Nouguier drew the first plans. ")
QUESTION = "When was the Eiffel Tower built?"
