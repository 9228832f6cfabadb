"""`python -m mrvl_convert.emit OUT_DIR ...`: validate every JSON file below the given directories."""
import sys
from pathlib import Path

from mrvl_convert.errors import MrvlConvertError
from mrvl_convert.emit.validate import validate_tree


def main() -> int:
    try:
        checked = sum(validate_tree(Path(arg)) for arg in sys.argv[1:])
    except MrvlConvertError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if checked == 0:
        print("error: no JSON files found to validate", file=sys.stderr)
        return 1
    print(f"{checked} JSON files valid against schemas/")
    return 0


sys.exit(main())
