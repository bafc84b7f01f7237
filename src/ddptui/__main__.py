from ddptui.cli import main

main()
