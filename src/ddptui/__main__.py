from ddptui.launch import main

main()
