import sys
from pathlib import Path

# The client is its own package (clients/python); tests use it from source.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
