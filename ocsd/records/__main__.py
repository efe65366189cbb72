"""``python -m ocsd.records validate PATH ...``"""

import sys

from ocsd.records import main

sys.exit(main())
