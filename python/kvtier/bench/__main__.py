from kvtier.bench.python_client import main

raise SystemExit(main())
