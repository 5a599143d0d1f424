from agent.cli import main

raise SystemExit(main())
