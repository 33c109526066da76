from probe_tui.cli import main

raise SystemExit(main())
