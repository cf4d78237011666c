from ringtrain.cli import main

main()
