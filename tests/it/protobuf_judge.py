"""Judges our text-format and JSON printers with the official protobuf library.

Usage: protobuf_judge.py GENERATED_DIR DATA_DIR

GENERATED_DIR holds the *_pb2.py modules protoc generated from proto/.
DATA_DIR holds manifest.tsv (fixture name, full message type per line) and,
per fixture, NAME.bin (our binary encoding), NAME.txt (our text format) and
NAME.json (our proto3 JSON). Both printed forms must parse, with
google.protobuf's own parsers, into the message the binary encodes.
"""

import importlib
import pathlib
import sys


def main() -> int:
    generated, data = (pathlib.Path(arg) for arg in sys.argv[1:3])
    sys.path.insert(0, str(generated))
    from google.protobuf import descriptor_pool, json_format, message_factory, text_format

    # Importing the generated modules registers every type in the default
    # pool: only what proto/ declares or imports, so an Any our printer expands
    # with a type proto/ does not know fails here.
    for module in sorted(generated.rglob("*_pb2.py")):
        importlib.import_module(".".join(module.relative_to(generated).with_suffix("").parts))
    pool = descriptor_pool.Default()

    parsers = {
        "txt": lambda text, message: text_format.Parse(text, message, descriptor_pool=pool),
        "json": lambda text, message: json_format.Parse(text, message, descriptor_pool=pool),
    }
    failures = []
    checked = 0
    for line in (data / "manifest.tsv").read_text(encoding="utf-8").splitlines():
        name, type_name = line.split("\t")
        message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(type_name))
        expected = message_class.FromString((data / f"{name}.bin").read_bytes())
        if expected.ByteSize() == 0:
            failures.append(f"{name}: the binary encoding is empty")
        for suffix, parse in parsers.items():
            printed = (data / f"{name}.{suffix}").read_text(encoding="utf-8")
            try:
                got = parse(printed, message_class())
            except Exception as error:  # any parse failure is a finding, reported with the rest
                failures.append(f"{name}.{suffix}: google.protobuf cannot parse it: {error}")
                continue
            if got != expected:
                failures.append(
                    f"{name}.{suffix}: parses into another message:\n{got}\n--- binary says ---\n{expected}"
                )
        checked += 1

    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"checked {checked} fixtures, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
