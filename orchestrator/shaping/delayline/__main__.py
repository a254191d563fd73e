import sys

from orchestrator.shaping.delayline.daemon import main

sys.exit(main())
